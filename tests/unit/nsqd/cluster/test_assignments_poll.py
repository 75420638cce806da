"""The node's assignments long-poll: a poll that ends with nothing newer is answered
"unchanged" by a lookupd that names its instance, and nothing is applied again; after a
document it could not apply, the node asks for the whole one again; an "unchanged" answer to
another version is not taken."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx
import pytest
import trio
import trio.testing

import nsqd.cluster.placement as placement
from nsqd.broker import Broker

NODE = "127.0.0.1:4150"
WHOLE = {"node": NODE, "deleted": [], "topics": {}}


async def _poll(
    monkeypatch: pytest.MonkeyPatch, answers: list[dict[str, Any]], applies: list[bool]
) -> tuple[list[dict[str, str]], int]:
    """Run the poll against a lookupd that gives ``answers`` in turn (then stops the test),
    the node's applies returning ``applies`` in turn: the queries sent, and the applies."""
    queries: list[dict[str, str]] = []
    applied = 0
    done = trio.Event()

    async def lookupd(request: httpx.Request) -> httpx.Response:
        queries.append(dict(request.url.params))
        if len(queries) > len(answers):
            done.set()
            await trio.sleep_forever()
        return httpx.Response(200, content=json.dumps(answers[len(queries) - 1]).encode())

    async def apply(broker: Broker, node_id: str, document: object) -> bool:
        nonlocal applied
        applied += 1
        return applies[applied - 1]

    real_client = httpx.AsyncClient

    def client(**kwargs: Any) -> httpx.AsyncClient:
        return real_client(transport=httpx.MockTransport(lookupd), **kwargs)

    monkeypatch.setattr(placement.httpx, "AsyncClient", client)
    monkeypatch.setattr(placement, "apply_assignments", apply)
    broker = cast(Broker, None)  # only handed to the (replaced) apply
    async with trio.open_nursery() as nursery:
        nursery.start_soon(placement.poll_assignments, broker, NODE, "l:4160", "l:4161", 1.0, {})
        await done.wait()
        nursery.cancel_scope.cancel()
    return queries, applied


async def test_an_unchanged_answer_applies_nothing_and_the_polls_go_on(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    unchanged = {"node": NODE, "version": 7, "instance": "i1", "unchanged": True}
    answers = [{**WHOLE, "version": 7, "instance": "i1"}, unchanged, unchanged]
    queries, applied = await _poll(monkeypatch, answers, [True])
    assert applied == 1
    assert queries[0] == {"node": NODE}
    after = {"node": NODE, "after": "7", "wait": "30", "if_changed": "1", "instance": "i1"}
    assert queries[1:] == [after, after, after]


async def test_after_a_document_not_applied_the_whole_one_comes_again(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    answers = [{**WHOLE, "version": 7, "instance": "i1"}, {**WHOLE, "version": 7, "instance": "i1"}]
    queries, applied = await _poll(monkeypatch, answers, [False, True])
    assert applied == 2
    assert queries[1] == {"node": NODE, "after": "7", "wait": "30"}  # no if_changed
    assert queries[2]["if_changed"] == "1"


async def test_a_lookupd_without_an_instance_is_asked_for_the_whole_document(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    answers = [{**WHOLE, "version": 7}]  # an older pnsq lookupd
    queries, _ = await _poll(monkeypatch, answers, [True])
    assert queries[1] == {"node": NODE, "after": "7", "wait": "30"}


async def test_an_unchanged_answer_to_another_version_is_not_taken(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    wrong = {"node": NODE, "version": 9, "instance": "i1", "unchanged": True}
    answers = [{**WHOLE, "version": 7, "instance": "i1"}, wrong]
    queries, applied = await _poll(monkeypatch, answers, [True])
    assert applied == 1
    assert queries[2] == {"node": NODE}  # started over: the whole document
