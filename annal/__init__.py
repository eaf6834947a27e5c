"""annal: a replicated, partitioned commit log in the style of Kafka's ZooKeeper era."""

__version__ = "0.1.0"
