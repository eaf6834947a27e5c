"""The producer client: partitioning, batching, sending (talks to brokers through annal.v1 only)."""
