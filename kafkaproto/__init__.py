"""Kafka's binary protocol on the broker: the PLAINTEXT:// listener and its APIs."""
