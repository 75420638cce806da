"""nsqd's side of a pnsq cluster: registration with nsqlookupd, lookupd discovery, the placement
exchange (assignments, progress, hand-over) and forwarding of stock publishes to a partition's
leader."""
