"""scripts/rolling-restart's read-back: every acknowledged message read back from a channel
(:func:`unread`), and where each one not read back is (:func:`locate`)."""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

import trio

from pnsq.client import open_consumer


async def read_back(seed: str, lookupd: str, topic: str, channel: str, missing: set[int]) -> None:
    """Consume ``channel``, taking each number read out of ``missing``, until it is empty (the
    caller bounds the time)."""
    async with open_consumer(
        seed, topic, channel, lookupd_http_address=lookupd, max_in_flight=500
    ) as consumer:
        async for message in consumer:
            missing.discard(int(message.body))
            await message.finish()
            if not missing:
                return


def unread(seed: str, lookupd: str, topic: str, channel: str, acked: list[int]) -> set[int]:
    """The numbers of ``acked`` not read back from ``channel`` within a minute."""
    missing = set(acked)

    async def run() -> None:
        with trio.move_on_after(60):
            await read_back(seed, lookupd, topic, channel, missing)

    trio.run(run)
    return missing


def locate(nodes: dict[int, str], topic: str, channel: str, numbers: set[int]) -> list[str]:
    """Where each of ``numbers`` (not read back) is: the partition and offset in the log of the
    leader holding it, or in none; with each leader's offsets and the channel's state there
    (what tells a message lost from one never delivered). ``nodes``: each nsqd's number and
    HTTP address."""
    found: dict[int, str] = {}
    lines = []
    for node, http in nodes.items():
        base = f"http://{http}"
        try:
            led = _get_json(f"{base}/partitions?topic={topic}")["partitions"]
            for entry in led:
                number, earliest, latest = entry["partition"], entry["earliest"], entry["latest"]
                lines.append(f"nsqd {node} leads partition {number}: {earliest}..{latest}")
                for offset, value in _bodies(base, topic, number, earliest, latest):
                    if value in numbers:
                        found[value] = f"partition {number} offset {offset}"
            stats = _get_json(f"{base}/stats?format=json&topic={topic}&channel={channel}")
        except (OSError, ValueError) as exc:
            lines.append(f"nsqd {node}: {exc}")
            continue
        for listed in stats.get("topics", []):
            for found_channel in listed.get("channels", []):
                state = {key: found_channel.get(key) for key in _CHANNEL_STATE}
                lines.append(f"nsqd {node} channel {json.dumps(state)}")
    nowhere = "in no leader's log"
    return lines + [f"{n}: {found.get(n, nowhere)}" for n in sorted(numbers)]


_CHANNEL_STATE = ("depth", "in_flight_count", "deferred_count", "requeue_count", "timeout_count")


def _bodies(base: str, topic: str, number: int, offset: int, end: int) -> list[tuple[int, int]]:
    """``(offset, message number)`` of partition ``number``'s records in ``[offset, end)``."""
    found = []
    while offset < end:
        query = f"topic={topic}&partition={number}&offset={offset}&format=ndjson"
        with urllib.request.urlopen(f"{base}/partition/read?{query}", timeout=5) as reply:  # noqa: S310
            records = [json.loads(line) for line in reply.read().splitlines()]
        if not records:
            break
        found += [(r["offset"], int(base64.b64decode(r["body"]))) for r in records]
        offset = records[-1]["offset"] + 1
    return found


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310
        return json.loads(reply.read())
