"""What every client shares: the connection to the cluster and the error base."""
