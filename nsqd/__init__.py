"""pnsq's nsqd: an NSQ-compatible message daemon on Trio."""

__version__ = "0.1.0"
NSQD_VERSION = "1.3.0"  # the nsqd version whose protocol and API pnsq speaks
