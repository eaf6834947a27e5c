"""Who a connection is and what it may do: Kafka's principals, ACLs and SASL
exchanges, as pure formats and decisions (docs/security.md).  Both protocols'
listeners and ``zk/`` use them; nothing here does I/O."""
