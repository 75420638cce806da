"""pnsq's nsqlookupd: nsqd discovery (nsqlookupd 1.3's TCP protocol V1 and HTTP API, with
youzan's partitioned extensions) and the placement of topic partitions on nsqds."""

__version__ = "0.1.0"
LOOKUPD_VERSION = "1.3.0"  # the nsqlookupd version whose protocol and API pnsq speaks
