"""lookupd's pure decisions: the registry of nodes, placement, liveness, failover (``decide``), the
HA election and the read endpoints' payloads. No I/O, no clock, no Trio."""
