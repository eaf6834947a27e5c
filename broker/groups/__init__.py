"""Consumer groups: the group coordinator, membership (JoinGroup/SyncGroup) and
the offsets topic's schema and state."""
