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
    assert live.views(11.0)[A] == NodeView(True, 11.0, None, up_since=10.0)
    live.disconnected(A, now=12.0)
    assert live.views(12.0)[A].connected
    live.disconnected(A, now=13.0)
    assert live.views(13.0)[A] == NodeView(False, 11.0, 13.0, up_since=10.0)
    assert not live.is_alive(A, 13.0)


def test_nodes_named_by_the_placements_get_a_grace_after_a_start() -> None:
    live = Liveness(heartbeat_timeout=2.0, start_grace=6.0)
    live.seed([A, B], now=100.0)
    # up until start + grace
    assert live.views(105.0)[A] == NodeView(True, 104.0, None, up_since=100.0)
    assert live.is_alive(A, 105.9)
    # never came back: dead
    assert live.views(106.5)[A] == NodeView(False, 104.0, 106.0, up_since=100.0)
    live.connected(B, now=103.0)  # came back in time: tracked for real from then on
    live.heartbeat(B, now=106.0)
    # (3 s silent before that heartbeat: back, up since then)
    assert live.views(107.0)[B] == NodeView(True, 106.0, None, up_since=106.0)


def test_leaving_needs_a_connected_node_and_ends_with_a_reconnect() -> None:
    live = Liveness(heartbeat_timeout=2.0, start_grace=6.0)
    assert not live.leaving(A)
    live.connected(A, now=1.0)
    assert live.leaving(A)
    assert live.views(1.5)[A].leaving
    live.disconnected(A, now=2.0)
    live.connected(A, now=3.0)  # restarted: serving again
    assert not live.views(3.0)[A].leaving


def test_a_node_is_up_since_it_last_came_back() -> None:
    """``up_since`` moves when the node comes up after being down: its first connection, a
    reconnection, or a heartbeat after a silence past the timeout (a pause that ended, a link
    that healed); not with a heartbeat or a second connection while it is up."""
    live = Liveness(heartbeat_timeout=2.0, start_grace=6.0)
    live.connected(A, now=10.0)
    live.heartbeat(A, now=11.5)
    live.connected(A, now=12.0)  # a second registration connection
    assert live.views(12.0)[A].up_since == 10.0
    live.heartbeat(A, now=16.0)  # 4.5 s silent: it was down
    assert live.views(16.0)[A].up_since == 16.0
    live.disconnected(A, now=17.0)
    live.disconnected(A, now=17.0)
    live.connected(A, now=18.0)
    assert live.views(18.0)[A].up_since == 18.0


def test_a_stall_excuses_only_the_nodes_up_when_it_began() -> None:
    """lookupd stalled from 1002.5 to 1004: A, heard from at 1001, was up when the stall began
    and is excused; B, silent since 1000.4, was already down (lookupd may have failed it over
    before the stall) and stays down; C, disconnected, stays down."""
    live = Liveness(heartbeat_timeout=2.0, start_grace=6.0)
    live.connected(A, 1001.0)
    live.connected(B, 1000.4)
    live.connected("c:1", 1001.0)
    live.disconnected("c:1", 1001.5)
    live.excuse(1.5, 1004.0)
    assert live.is_alive(A, 1004.0)
    assert live.views(1004.0)[B].last_heartbeat == 1000.4
    assert not live.is_alive(B, 1004.0)
    assert live.views(1004.0)["c:1"].last_heartbeat == 1001.0
