"""Tests for nsqd.core.cursor_frames: which channel states each follower applied, counted in
the leader's Cursors frames."""

from __future__ import annotations

from nsqd.core.cursor_frames import MAX_UNACKED, CursorFrames

A, B = "10.0.0.2:4150", "10.0.0.3:4150"


def test_a_frame_built_after_the_mark_and_acknowledged_counts() -> None:
    frames = CursorFrames()
    stream = frames.start(A)
    mark = frames.mark("c")
    assert not frames.applied_since("c", mark, (A,))
    frames.sent(A, "c", stream)
    assert not frames.applied_since("c", mark, (A,))  # sent, not yet applied
    frames.acked(A, "c", stream)
    assert frames.applied_since("c", mark, (A,))


def test_a_frame_built_before_the_mark_does_not_count() -> None:
    frames = CursorFrames()
    stream = frames.start(A)
    frames.sent(A, "c", stream)  # built before the FINs: it lacks them
    mark = frames.mark("c")
    frames.acked(A, "c", stream)
    assert not frames.applied_since("c", mark, (A,))
    frames.sent(A, "c", stream)
    frames.acked(A, "c", stream)
    assert frames.applied_since("c", mark, (A,))


def test_every_follower_named_must_have_applied_one() -> None:
    frames = CursorFrames()
    a, b = frames.start(A), frames.start(B)
    mark = frames.mark("c")
    for node, stream in ((A, a), (B, b)):
        frames.sent(node, "c", stream)
    frames.acked(A, "c", a)
    assert not frames.applied_since("c", mark, (A, B))
    assert frames.applied_since("c", mark, (A,))  # B left the in-sync set
    frames.acked(B, "c", b)
    assert frames.applied_since("c", mark, (A, B))
    assert frames.applied_since("c", mark, ())  # alone in sync


def test_channels_are_counted_apart_and_acks_match_in_order() -> None:
    frames = CursorFrames()
    stream = frames.start(A)
    mark_c, mark_d = frames.mark("c"), frames.mark("d")
    frames.sent(A, "d", stream)
    frames.sent(A, "c", stream)
    frames.acked(A, "d", stream)
    assert frames.applied_since("d", mark_d, (A,))
    assert not frames.applied_since("c", mark_c, (A,))
    frames.acked(A, "c", stream)
    assert frames.applied_since("c", mark_c, (A,))


def test_an_acknowledgement_of_a_later_frame_passes_the_skipped_ones() -> None:
    frames = CursorFrames()
    stream = frames.start(A)
    frames.sent(A, "d", stream)  # never acknowledged
    mark = frames.mark("c")
    frames.sent(A, "c", stream)
    frames.acked(A, "c", stream)
    assert frames.applied_since("c", mark, (A,))
    frames.acked(A, "d", stream)  # nothing of d waits any more: counts for nothing
    assert not frames.applied_since("d", {A: 1}, (A,))


def test_a_new_stream_forgets_what_the_old_one_sent_and_heard() -> None:
    frames = CursorFrames()
    old = frames.start(A)
    mark = frames.mark("c")
    frames.sent(A, "c", old)  # built after the mark, on a stream about to end
    new = frames.start(A)
    frames.acked(A, "c", old)  # a late answer on the old stream
    assert not frames.applied_since("c", mark, (A,))
    frames.sent(A, "c", old)  # the old stream's task, still running
    frames.acked(A, "c", new)  # matches nothing sent on the new stream
    assert not frames.applied_since("c", mark, (A,))
    frames.sent(A, "c", new)  # the new stream sends every channel's state again
    frames.acked(A, "c", new)
    assert frames.applied_since("c", mark, (A,))


def test_a_follower_that_answers_nothing_costs_bounded_memory() -> None:
    frames = CursorFrames()
    stream = frames.start(A)
    for _ in range(MAX_UNACKED * 3):
        frames.sent(A, "c", stream)
    assert len(frames._waiting[A]) == MAX_UNACKED
    mark = frames.mark("c")
    frames.sent(A, "c", stream)
    for _ in range(MAX_UNACKED + 1):
        frames.acked(A, "c", stream)
    assert frames.applied_since("c", mark, (A,))


def test_clear_forgets_everything() -> None:
    frames = CursorFrames()
    stream = frames.start(A)
    frames.sent(A, "c", stream)
    frames.acked(A, "c", stream)
    frames.clear()
    assert not frames.applied_since("c", {}, (A,))
    frames.sent(A, "c", stream)  # the stream of the old epoch: no longer current
    frames.acked(A, "c", stream)
    assert not frames.applied_since("c", {}, (A,))
