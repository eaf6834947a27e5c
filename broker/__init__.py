"""The broker process: configuration, request handling, replicas."""
