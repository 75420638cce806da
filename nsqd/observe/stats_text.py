"""nsqd's ``/stats?format=text`` (``printStats``): the :func:`~nsqd.observe.stats.stats_document`
laid out as nsqd prints it; the header line is ``--version``'s."""

from __future__ import annotations

from datetime import datetime

from pnsq._goflag.syntax import format_go_duration
from pnsq._netio.cli import version_line

from .. import __version__
from .stats import Json


def e2e_text(latency: Json) -> str:
    """The ``e2e%:`` column of the text ``/stats``: each percentile's value as nsqd's
    ``NanoSecondToHuman`` prints it (``1.2ms, 0.4ms``)."""
    return ", ".join(_nanoseconds_to_human(p["value"]) for p in latency["percentiles"] or ())


def _nanoseconds_to_human(value: float) -> str:
    for scale, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value > scale:
            return f"{value / scale:0.1f}{suffix}"
    return f"{value:0.1f}ns"


def _duration_since(ts: int, now: float) -> str:
    return format_go_duration(int(now - ts) * 1_000_000_000)  # truncated to the second


def _client_line(client: Json, now: float) -> str:
    port = client["remote_address"].rsplit(":", 1)[-1]
    ident = f"{client['hostname']}:{port} {client['user_agent']}"
    connected = _duration_since(client["connect_ts"], now)
    counts = client.get("pub_counts")
    if counts:
        total = sum(c["count"] for c in counts)
        topics = ",".join(f"{c['topic']}={c['count']}" for c in counts)
        return (
            f"[{client['version']} {ident:<21}] msgs: {total:<8} topics: {topics} "
            f"connected: {connected}"
        )
    return (
        f"[{client['version']} {ident:<21}] state: {client['state']} "
        f"inflt: {client['in_flight_count']:<4} rdy: {client['ready_count']:<4} "
        f"fin: {client['finish_count']:<8} re-q: {client['requeue_count']:<8} "
        f"msgs: {client['message_count']:<8} connected: {connected}"
    )


def render_text(doc: Json, now: float) -> bytes:
    """nsqd's ``printStats`` layout of a :func:`stats_document` at wall time ``now``."""
    start = datetime.fromtimestamp(doc["start_time"]).astimezone()
    stamp = start.isoformat(timespec="seconds").replace("+00:00", "Z")
    uptime = format_go_duration(int((now - doc["start_time"]) * 1e9))
    header = version_line("nsqd", doc["version"], __version__)  # as --version prints it
    out = [f"{header}\n", f"start_time {stamp}\n", f"uptime {uptime}\n"]
    out.append(f"\nHealth: {doc['health']}\n")
    memory = doc.get("memory")
    if memory is not None:
        out.append("\nMemory:\n")
        out.extend(f"   {key:<25}\t{value}\n" for key, value in memory.items())
    topics = doc["topics"] or []
    out.append("\nTopics:" if topics else "\nTopics: None\n")
    for t in topics:
        prefix = "*P " if t["paused"] else "   "
        out.append(
            f"\n{prefix}[{t['topic_name']:<15}] depth: {t['depth']:<5} "
            f"be-depth: {t['backend_depth']:<5} msgs: {t['message_count']:<8} "
            f"e2e%: {e2e_text(t['e2e_processing_latency'])}\n"
        )
        for c in t["channels"]:
            prefix = "   *P " if c["paused"] else "      "
            out.append(
                f"{prefix}[{c['channel_name']:<25}] depth: {c['depth']:<5} "
                f"be-depth: {c['backend_depth']:<5} inflt: {c['in_flight_count']:<4} "
                f"def: {c['deferred_count']:<4} re-q: {c['requeue_count']:<5} "
                f"timeout: {c['timeout_count']:<5} msgs: {c['message_count']:<8} "
                f"e2e%: {e2e_text(c['e2e_processing_latency'])}\n"
            )
            out.extend(f"        {_client_line(client, now)}\n" for client in c["clients"] or [])
    producers = doc["producers"] or []
    if producers:
        out.append("\nProducers:\n")
        out.extend(f"   {_client_line(p, now)}\n" for p in producers)
    else:
        out.append("\nProducers: None\n")
    return "".join(out).encode()
