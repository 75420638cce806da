"""pnsq's nsqd: an NSQ-compatible message daemon on Trio."""

__version__ = "0.1.0"
