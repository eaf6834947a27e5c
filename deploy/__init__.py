"""Running annal: ZooKeeper from the machine's installation, the local cluster runner."""
