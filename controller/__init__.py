"""The controller: election over ZooKeeper and the partition state machine."""
