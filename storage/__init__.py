"""annal's storage engine: Kafka-format logs with indexes, recovery, retention and compaction."""
