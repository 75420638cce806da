"""lookupd's HTTP API: nsqlookupd's endpoints, youzan's admin endpoints, pnsq's node endpoints,
forwarding to the HA leader, and ``/metrics``."""
