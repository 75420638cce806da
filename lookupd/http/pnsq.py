"""The endpoints pnsq's nodes use on lookupd, and its ``/metrics``.

* ``GET /pnsq/assignments?node=`` — what a node must hold (a long-poll with ``after=``);
* ``POST /pnsq/progress`` — a leader's report on its followers (JSON body);
* ``POST /pnsq/leaving?node=`` — a node shuts down cleanly: move its leaderships;
* ``GET /metrics`` — Prometheus text (:mod:`lookupd.http.metrics`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import trio

from pnsq._netio.http import Receive
from protocol.lookup import assignments_payload

from ..state.cluster import Cluster
from .base import HTTPError, Reply, Request, go_atoi

MAX_ASSIGNMENTS_WAIT = 60  # seconds a /pnsq/assignments long-poll may wait
MAX_BODY = 4 << 20  # bytes of a progress report
PROGRESS_PATH = "/pnsq/progress"
LEAVING_PATH = "/pnsq/leaving"


class PnsqEndpoints:
    """The handlers (see the module doc); ``metrics`` renders ``/metrics``."""

    def __init__(self, cluster: Cluster, metrics: Callable[[], bytes] | None = None) -> None:
        self.cluster = cluster
        self.render_metrics = metrics

    async def metrics(self, request: Request) -> Reply:
        """pnsq: Prometheus text exposition (see :mod:`lookupd.http.metrics`)."""
        if self.render_metrics is None:
            raise HTTPError(404, "NOT_FOUND")
        return self.render_metrics()

    async def assignments(self, request: Request) -> Reply:
        """pnsq: the topics ``node`` must hold. A long-poll with ``after=<version>``: answered
        once placements newer than that version are on disk, or after ``wait`` seconds
        (default 30, at most 60); the reply's ``version`` is the one to send next."""
        node = request.arg("node")
        if not node:
            raise HTTPError(400, "MISSING_ARG_NODE")
        after = request.arg("after")
        if after is not None:
            wait = min(go_atoi(request.arg("wait") or "30"), MAX_ASSIGNMENTS_WAIT)
            with trio.move_on_after(wait):
                await self.cluster.wait_saved_after(go_atoi(after))
        version = self.cluster.saved_version
        payload = assignments_payload(
            node, self.cluster.assignments(node), list(self.cluster.saved_deleted)
        )
        return {**payload, "version": version}

    async def progress(self, request: Request) -> Reply:
        """pnsq: a leader's report on its followers, ``{"node", "partitions": [{"topic",
        "partition", "epoch", "caught_up": [...], "lagging": [...]}]}``."""
        try:
            document = json.loads(request.body or b"null")
        except (ValueError, RecursionError) as exc:
            raise HTTPError(400, "INVALID_BODY") from exc
        if not isinstance(document, dict):
            raise HTTPError(400, "INVALID_BODY")
        node, reports = document.get("node"), document.get("partitions")
        if not isinstance(node, str) or not isinstance(reports, list):
            raise HTTPError(400, "INVALID_BODY")
        self.cluster.report_progress(node, [r for r in reports if isinstance(r, dict)])
        return None

    async def leaving(self, request: Request) -> Reply:
        """pnsq: ``node`` shuts down cleanly; its leaderships move to in-sync replicas."""
        node = request.arg("node")
        if not node:
            raise HTTPError(400, "MISSING_ARG_NODE")
        if not self.cluster.leaving(node):
            raise HTTPError(404, "NODE_NOT_FOUND")
        return None


async def read_body(receive: Receive, limit: int) -> bytes:
    """An ASGI request body, at most ``limit`` bytes (413 past it)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, "BODY_TOO_BIG")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
