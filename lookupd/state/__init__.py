"""lookupd's state at runtime and on disk: the metadata store, versioned saves, the cluster view and
the failover supervisor that carries out the decisions."""
