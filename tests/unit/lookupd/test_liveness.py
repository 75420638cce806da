"""lookupd.core.liveness: connections, heartbeats, the start grace and leaving, as decide() sees
them."""

from __future__ import annotations

from lookupd.core.decide import NodeView
from lookupd.core.liveness import Liveness

A, B = "a:1", "b:1"


def test_a_connected_node_is_up_until_its_last_connection_drops() -> None:
    live = Liveness(heartbeat_timeout=2.0, start_grace=6.0)
    live.connected(A, now=10.0)
    live.connected(A, now=10.5)  # a second lookupd connection of the same node
    live.heartbeat(A, now=11.0)
    assert live.views(11.0)[A] == NodeView(True, 11.0, None)
    live.disconnected(A, now=12.0)
    assert live.views(12.0)[A].connected
    live.disconnected(A, now=13.0)
    assert live.views(13.0)[A] == NodeView(False, 11.0, 13.0)
    assert not live.is_alive(A, 13.0)


def test_nodes_named_by_the_placements_get_a_grace_after_a_start() -> None:
    live = Liveness(heartbeat_timeout=2.0, start_grace=6.0)
    live.seed([A, B], now=100.0)
    assert live.views(105.0)[A] == NodeView(True, 104.0, None)  # up until start + grace
    assert live.is_alive(A, 105.9)
    assert live.views(106.5)[A] == NodeView(False, 104.0, 106.0)  # never came back: dead
    live.connected(B, now=103.0)  # came back in time: tracked for real from then on
    live.heartbeat(B, now=106.0)
    assert live.views(107.0)[B] == NodeView(True, 106.0, None)


def test_leaving_needs_a_connected_node_and_ends_with_a_reconnect() -> None:
    live = Liveness(heartbeat_timeout=2.0, start_grace=6.0)
    assert not live.leaving(A)
    live.connected(A, now=1.0)
    assert live.leaving(A)
    assert live.views(1.5)[A].leaving
    live.disconnected(A, now=2.0)
    live.connected(A, now=3.0)  # restarted: serving again
    assert not live.views(3.0)[A].leaving
