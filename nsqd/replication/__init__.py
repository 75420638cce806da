"""Replication over ``"  R1"`` on the TCP port: the leader's stream to each follower
(:mod:`.leader`) and the follow task of every replica partition (:mod:`.follower`)."""

from protocol.replication import MAGIC

from .follower import Followers
from .leader import serve_follower

__all__ = ["MAGIC", "Followers", "serve_follower"]
