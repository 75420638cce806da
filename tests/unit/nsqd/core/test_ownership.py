"""The pure ownership core: placements from lookupd's assignments, the per-partition state
machine, and the plan from what a node holds to what lookupd placed on it."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from nsqd.core.errors import NotLeaderError, PartitionNotFoundError, StaleEpochError
from nsqd.core.ownership import (
    STANDALONE,
    LocalTopic,
    PartitionState,
    Placement,
    Role,
    TopicPlan,
    TopicSettings,
    placements_for,
    plan,
    require_held,
)

A, B, C = "10.0.0.1:4150", "10.0.0.2:4150", "10.0.0.3:4150"


def test_placements_name_only_this_nodes_partitions_with_their_role() -> None:
    parts = [(A, (B,), 3, (A, B)), (B, (A,), 1, (B,)), (C, (B,), 0, (C, B))]
    assert placements_for(A, parts) == {
        0: Placement(Role.LEADER, 3, A, (B,), (A, B)),
        1: Placement(Role.REPLICA, 1, B, (A,), (B,)),
    }
    assert placements_for("elsewhere:1", parts) == {}


def test_a_standalone_partition_is_led() -> None:
    state = PartitionState()
    assert state.leads
    state.require_leader("PUB")  # no error
    assert state.placement is STANDALONE


def test_a_replica_refuses_the_leaders_work() -> None:
    state = PartitionState(Placement(Role.REPLICA, 2, B))
    with pytest.raises(NotLeaderError, match=B):
        state.require_leader("PUB")


def test_epochs_only_move_forward() -> None:
    state = PartitionState(Placement(Role.REPLICA, 2, B))
    assert state.apply(Placement(Role.LEADER, 3, A)) is True  # promoted: role changed
    assert state.apply(Placement(Role.LEADER, 3, A, (B,))) is False  # same role, new replicas
    with pytest.raises(StaleEpochError):
        state.apply(Placement(Role.REPLICA, 2, B))
    assert state.leads  # the stale word changed nothing
    assert state.epoch == 3


def test_require_held() -> None:
    require_held({0: PartitionState()}, "t", 0)
    with pytest.raises(PartitionNotFoundError):
        require_held({0: PartitionState()}, "t", 1)


SETTINGS = TopicSettings(partition_num=2)


def _topic(
    name: str, held: dict[int, Placement], *, ordered: bool = False, partition_num: int = 2
) -> TopicPlan:
    return TopicPlan(name, held, TopicSettings(partition_num=partition_num, ordered=ordered))


LEAD0 = Placement(Role.LEADER, 0, A)
REPL1 = Placement(Role.REPLICA, 0, B)


def test_plan_creates_adds_changes_drops_and_sets_flags() -> None:
    wanted = [
        _topic("new", {0: LEAD0}),
        _topic("grow", {0: LEAD0, 1: REPL1}),
        _topic("promote", {1: Placement(Role.LEADER, 1, A)}),
        _topic("shrink", {0: LEAD0}),
        _topic("flags", {0: LEAD0}, ordered=True),
        _topic("expand", {0: LEAD0}, partition_num=4),
        _topic("elsewhere", {}),  # lookupd lists it, nothing of it is here
    ]
    local = {
        "grow": LocalTopic({0: LEAD0}, SETTINGS),
        "promote": LocalTopic({1: REPL1}, SETTINGS),
        "shrink": LocalTopic({0: LEAD0, 1: LEAD0}, SETTINGS),
        "flags": LocalTopic({0: LEAD0}, SETTINGS),
        "expand": LocalTopic({0: LEAD0}, SETTINGS),
        "unlisted": LocalTopic({0: STANDALONE}, SETTINGS),  # left alone
    }
    steps = plan(wanted, local)
    assert [t.name for t in steps.create] == ["new"]
    assert steps.add == [("grow", 1, REPL1)]
    assert steps.change == [("promote", 1, Placement(Role.LEADER, 1, A))]
    assert steps.drop == [("shrink", 1)]
    assert [t.name for t in steps.settings] == ["flags", "expand"]
    assert steps


def test_nothing_to_do_is_an_empty_plan() -> None:
    wanted = [_topic("t", {0: LEAD0})]
    assert not plan(wanted, {"t": LocalTopic({0: LEAD0}, SETTINGS)})


roles = st.sampled_from(list(Role))
placements = st.builds(Placement, roles, st.integers(0, 3), st.sampled_from([A, B]))
helds = st.dictionaries(st.integers(0, 3), placements, max_size=4)


@given(have=helds, want=helds)
def test_applying_a_plan_reaches_the_wanted_placement(
    have: dict[int, Placement], want: dict[int, Placement]
) -> None:
    steps = plan([TopicPlan("t", want)], {"t": LocalTopic(have, TopicSettings())})
    result = dict(have)
    for _, number, placement in steps.add + steps.change:
        result[number] = placement
    for _, number in steps.drop:
        del result[number]
    assert result == want


def test_a_bounded_plan_opens_at_most_max_opens_and_changes_every_role_at_once() -> None:
    """A node handed topics of hundreds of partitions opens them a group at a time: each
    plan of the same document opens at most ``max_opens`` more, changes of role and drops
    are never deferred, and the plans end where the unbounded one does."""
    many = {n: LEAD0 if n % 2 else REPL1 for n in range(10)}
    promoted = Placement(Role.LEADER, 1, A)
    wanted = [_topic("big", many, partition_num=10), _topic("promote", {1: promoted})]
    local: dict[str, LocalTopic] = {"promote": LocalTopic({1: REPL1, 0: REPL1}, SETTINGS)}
    steps = plan(wanted, local, max_opens=4)
    assert [(t.name, sorted(t.held)) for t in steps.create] == [("big", [0, 1, 2, 3])]
    assert steps.deferred == 6
    assert steps.change == [("promote", 1, promoted)]
    assert steps.drop == [("promote", 0)]
    held = dict(steps.create[0].held)
    rounds = 1
    while steps.deferred:
        local["big"] = LocalTopic(dict(held), TopicSettings(partition_num=10))
        steps = plan(wanted, local, max_opens=4)
        assert len(steps.add) <= 4
        assert not steps.create
        held.update({number: placement for _, number, placement in steps.add})
        rounds += 1
    assert held == many
    assert rounds == 3


def test_a_bound_of_nothing_left_to_open_changes_nothing() -> None:
    wanted = [_topic("t", {0: LEAD0})]
    assert plan(wanted, {}, max_opens=None).create == plan(wanted, {}, max_opens=5).create
    assert plan(wanted, {}, max_opens=5).deferred == 0
