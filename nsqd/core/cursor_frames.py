"""Which channel states each follower of a partition has applied, counted in the leader's
Cursors frames.

A leader sends a channel's state in a partition to a follower as a Cursors frame (the whole
state: the confirmed offset, and the FINs and deferrals above it); the follower applies the
frames of its stream in order and answers each with a CursorsAck. A frame *built* after a FIN
carries it; so once every in-sync follower has acknowledged a frame built after the FIN, every
one of them holds it, whether or not the confirmed offset passed it (an earlier message still
out or waiting keeps it below).

The frames of each follower are numbered per channel as the leader builds them
(:meth:`CursorFrames.sent`); the acknowledgements come in the same order and are matched to
them (:meth:`CursorFrames.acked`). An acknowledgement that does not match the oldest frame
waiting for one (a follower that skipped frames: one whose topic was missing answers none)
passes the frames before the one it matches, which then count as not applied; a later frame
carries the whole state again. A stream that starts (:meth:`CursorFrames.start`) takes a
number of its own: what an earlier stream to the node built or heard is not counted from then
on (the new one sends every channel's state again).
"""

from __future__ import annotations

from collections import deque
from typing import Final

__all__ = ["MAX_UNACKED", "CursorFrames"]

#: frames kept per follower waiting for their acknowledgement; past it the oldest are
#: forgotten (they count as not applied): a follower that answers none costs bounded memory
MAX_UNACKED: Final = 1024


class CursorFrames:
    """The numbered Cursors frames sent to each follower node, and which were applied."""

    def __init__(self) -> None:
        #: follower -> channel -> the number of the last frame built for it
        self._sent: dict[str, dict[str, int]] = {}
        #: follower -> channel -> the number of the last frame it acknowledged
        self._applied: dict[str, dict[str, int]] = {}
        #: follower -> (channel, number) of the frames sent, oldest first, not yet acknowledged
        self._waiting: dict[str, deque[tuple[str, int]]] = {}
        #: follower -> the number of its current stream
        self._streams: dict[str, int] = {}
        self._started = 0

    def start(self, node: str) -> int:
        """A new stream to ``node`` begins; returns its number, for :meth:`sent` and
        :meth:`acked`. The frames sent on the one before are not waited for any more."""
        self._started += 1
        self._streams[node] = self._started
        self._waiting.pop(node, None)
        return self._started

    def sent(self, node: str, channel: str, stream: int) -> None:
        """A frame of ``channel``'s state, built now, goes to ``node`` on ``stream`` (a frame
        the follower acknowledges: not a deletion). Nothing, from a stream no longer current."""
        if self._streams.get(node) != stream:
            return
        numbers = self._sent.setdefault(node, {})
        number = numbers[channel] = numbers.get(channel, 0) + 1
        waiting = self._waiting.setdefault(node, deque())
        waiting.append((channel, number))
        if len(waiting) > MAX_UNACKED:
            waiting.popleft()

    def acked(self, node: str, channel: str, stream: int) -> None:
        """``node`` acknowledged, on ``stream``, its oldest unacknowledged frame of ``channel``
        (nothing, from a stream no longer current)."""
        if self._streams.get(node) != stream:
            return
        waiting = self._waiting.get(node)
        while waiting:
            name, number = waiting.popleft()
            if name == channel:
                self._applied.setdefault(node, {})[channel] = number
                return

    def mark(self, channel: str) -> dict[str, int]:
        """What :meth:`applied_since` needs to tell that every follower applied a frame of
        ``channel`` built after this call: per node sent to so far, the next frame's number."""
        return {node: numbers.get(channel, 0) + 1 for node, numbers in self._sent.items()}

    def applied_since(self, channel: str, mark: dict[str, int], nodes: tuple[str, ...]) -> bool:
        """Whether each of ``nodes`` acknowledged a frame of ``channel`` built after ``mark``
        was taken (a node sent nothing by then: any frame of it)."""
        return all(
            self._applied.get(node, {}).get(channel, 0) >= mark.get(node, 1) for node in nodes
        )

    def clear(self) -> None:
        """Forget everything (a new epoch: the followers answer to a new leader)."""
        self._sent.clear()
        self._applied.clear()
        self._waiting.clear()
        self._streams.clear()
