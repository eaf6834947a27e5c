"""The broker's Kafka listener and its handlers: Kafka's wire protocol in front of
the same broker services the gRPC edge calls (docs/kafka-protocol.md)."""
