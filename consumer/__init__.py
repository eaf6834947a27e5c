"""Consumers: the simple (low-level) consumer; talks to brokers through annal.v1 only."""
