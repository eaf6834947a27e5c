"""Replication: the replica manager and its partitions, the followers' fetchers
and their transports, ISR changes and the deposed leader's fence."""
