"""nsqd.core.partition_state: log end, high-watermark and the in-sync set, without Trio."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from nsqd.core.errors import StaleEpochError
from nsqd.core.partition_state import PartitionState, Placement, Role

A, B, C = "a:1", "b:1", "c:1"


def leader(isr: tuple[str, ...] = (A, B, C), epoch: int = 1) -> Placement:
    return Placement(Role.LEADER, epoch, A, (B, C), isr)


def test_standalone_high_watermark_is_the_log_end() -> None:
    state = PartitionState(log_end=7)
    assert state.high_watermark == 7
    assert state.appended(10) == 10


def test_leader_alone_in_sync_reads_to_its_log_end() -> None:
    state = PartitionState(leader(isr=(A,)), log_end=3)
    assert state.followers == ()
    assert state.appended(5) == 5


def test_high_watermark_waits_for_every_in_sync_follower() -> None:
    state = PartitionState(leader(), log_end=0)
    assert state.followers == (B, C)
    assert state.appended(10) == 0
    assert state.follower_acked(B, 10) is False  # C has nothing yet
    assert state.high_watermark == 0
    assert state.follower_acked(C, 6) is True
    assert state.high_watermark == 6
    assert state.follower_acked(C, 10) is True
    assert state.high_watermark == 10
    assert state.follower_acked(C, 9) is False  # acknowledgements never move back
    assert state.acked(C) == 10


def test_a_follower_out_of_the_isr_does_not_hold_consumers_back() -> None:
    state = PartitionState(leader(), log_end=0)
    state.appended(8)
    state.follower_acked(B, 8)
    assert state.high_watermark == 0  # C lags
    state.apply(leader(isr=(A, B)))  # lookupd took C out of the in-sync set
    assert state.high_watermark == 8


def test_the_high_watermark_never_passes_the_local_log() -> None:
    state = PartitionState(leader(isr=(A, B)), log_end=4)
    state.follower_acked(B, 100)
    assert state.high_watermark == 4
    state.appended(9)
    assert state.high_watermark == 9


def test_a_follower_learns_the_high_watermark_up_to_what_it_holds() -> None:
    state = PartitionState(Placement(Role.REPLICA, 1, A, (B,), (A, B)), log_end=5)
    assert state.high_watermark == 0  # until the leader says
    state.leader_high_watermark(4)
    assert state.high_watermark == 4
    state.truncated(3)
    assert (state.log_end, state.high_watermark) == (3, 3)
    state.appended(6)
    assert state.high_watermark == 3  # a follower's own appends do not move it
    state.leader_high_watermark(10)
    assert state.high_watermark == 6


def test_a_reopened_leader_with_followers_waits_for_them_to_know_its_high_watermark() -> None:
    """Records past the true high-watermark may be cut by a newer leader: a leader opened
    from disk serves none of them until its in-sync followers acknowledge."""
    state = PartitionState(leader(isr=(A, B)), log_end=7)
    assert state.high_watermark == 0
    state.follower_acked(B, 5)
    assert state.high_watermark == 5
    assert PartitionState(leader(isr=(A,)), log_end=7).high_watermark == 7  # alone: all


def test_a_new_epoch_forgets_the_old_acknowledgements() -> None:
    state = PartitionState(leader(isr=(A, B)), log_end=0)
    state.appended(5)
    state.follower_acked(B, 5)
    assert state.high_watermark == 5
    state.apply(leader(isr=(A, B), epoch=2))
    assert state.acked(B) == 0
    state.appended(9)
    assert state.high_watermark == 5  # not past what B acknowledged under the new epoch
    with pytest.raises(StaleEpochError):
        state.apply(leader(epoch=1))


def test_a_promoted_follower_keeps_its_high_watermark_until_followers_ack() -> None:
    state = PartitionState(Placement(Role.REPLICA, 1, A, (B,), (A, B)), log_end=0)
    state.appended(10)
    state.leader_high_watermark(7)
    state.apply(Placement(Role.LEADER, 2, B, (A,), (B, A)))
    assert state.high_watermark == 7
    state.follower_acked(A, 10)
    assert state.high_watermark == 10


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 50)),
            st.tuples(st.sampled_from([B, C]), st.integers(0, 60)),
        ),
        max_size=40,
    )
)
def test_leader_high_watermark_is_monotonic_and_bounded(
    events: list[tuple[str, int]],
) -> None:
    state = PartitionState(leader(), log_end=0)
    end, acked = 0, {B: 0, C: 0}
    for kind, amount in events:
        before = state.high_watermark
        if kind == "append":
            end += amount
            state.appended(end)
        else:
            acked[kind] = max(acked[kind], min(amount, end))
            state.follower_acked(kind, min(amount, end))
        assert before <= state.high_watermark <= state.log_end == end
        assert state.high_watermark <= min(acked.values()) or state.high_watermark == before


def test_a_follower_under_steady_load_counts_as_caught_up() -> None:
    """Acknowledging a batch that held the whole log when it was sent is being caught up,
    even though the log grew meanwhile."""
    state = PartitionState(leader(isr=(A,)), log_end=0)
    state.appended(100)
    state.sent_to_end(B, 100)
    state.appended(150)  # more arrived while the batch travelled
    state.follower_acked(B, 60, now=1.0)
    assert state.caught_up_at(B) is None  # only part of that batch so far
    state.follower_acked(B, 100, now=2.0)
    assert state.caught_up_at(B) == 2.0
    state.follower_acked(C, 120, now=3.0)
    assert state.caught_up_at(C) is None  # behind, and nothing whole was sent to it


def test_an_ordered_channel_waits_for_every_in_sync_follower_to_hold_its_fin() -> None:
    state = PartitionState(leader(isr=(A, B, C)), log_end=10)
    assert not state.cursor_replicated("c", 3)
    state.cursor_acked(B, "c", 3)
    assert not state.cursor_replicated("c", 3)  # C lacks it
    state.cursor_acked(C, "c", 4)
    assert state.cursor_replicated("c", 3)
    assert not state.cursor_replicated("c", 4)
    state.apply(leader(isr=(A, C)))  # B left the in-sync set: only C counts
    assert state.cursor_replicated("c", 4)
    state.apply(leader(isr=(A, C), epoch=2))  # a new epoch: acknowledged under the old one
    assert not state.cursor_replicated("c", 4)
    assert PartitionState(leader(isr=(A,))).cursor_replicated("c", 99)  # alone in sync


def test_a_new_epoch_forgets_the_cursor_frames_the_followers_applied() -> None:
    state = PartitionState(leader(isr=(A, B)), log_end=10)
    stream = state.cursor_frames.start(B)
    mark = state.cursor_frames.mark("c")
    state.cursor_frames.sent(B, "c", stream)
    state.cursor_frames.acked(B, "c", stream)
    assert state.cursor_frames.applied_since("c", mark, state.followers)
    state.apply(leader(isr=(A, B)))  # the same epoch: kept
    assert state.cursor_frames.applied_since("c", mark, state.followers)
    state.apply(leader(isr=(A, B), epoch=2))  # applied under the old leader's epoch
    assert not state.cursor_frames.applied_since("c", mark, state.followers)
