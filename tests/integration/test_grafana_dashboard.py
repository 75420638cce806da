"""docs/grafana-dashboard.json queries only metrics a live pnsq nsqd really exports: every metric
name in its panels' and variables' PromQL is a sample name of ``/metrics`` scraped after some
traffic (publish, a consumer that FINs, with the e2e latency percentiles on)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol import Fin, Rdy, Sub
from tests.daemons import ROOT, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"

# PromQL words that are not metric names: functions, aggregations, keywords, Grafana's
PROMQL_WORDS = {
    "abs", "and", "avg", "by", "count", "delta", "histogram_quantile", "increase", "irate",
    "label_values", "max", "min", "or", "rate", "sum", "topk", "unless", "vector", "without",
    "offset", "on", "ignoring", "group_left", "group_right", "bool", "clamp_min", "clamp_max",
}  # fmt: skip


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if "expr" in t]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found.append(query["query"])
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names in one PromQL expression: what is left once label matchers, ranges,
    strings, ``by (...)`` lists, numbers and PromQL's own words are taken out."""
    text = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers (and legend templates)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r'"[^"]*"', " ", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    text = re.sub(r",\s*[a-z_]+\s*\)", ")", text)  # label_values(metric, label)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text))
    return {w for w in words if w not in PROMQL_WORDS and not w.startswith("__")}


def test_metric_names_parse() -> None:
    assert metric_names(
        'sum by (topic) (rate(nsq_topic_message_count{instance=~"$i"}[$__rate_interval]))'
    ) == {"nsq_topic_message_count"}
    assert metric_names('label_values(nsq_channel_depth{topic=~"$t"}, channel)') == {
        "nsq_channel_depth"
    }
    assert metric_names('count(nsqd_info{health!="OK"}) or vector(0)') == {"nsqd_info"}


def scrape_after_traffic(work: Path) -> set[str]:
    flags = ("--e2e-processing-latency-percentile=0.99,0.5",)
    daemon = pnsq_nsqd(work / "nsqd", *flags).start()
    try:
        consumer = RawClient(daemon.tcp_address)
        try:
            consumer.send(Sub("dash", "readers"), Rdy(10))
            assert consumer.read().data == b"OK"
            request = urllib.request.Request(
                f"http://{daemon.http_address}/mpub?topic=dash", b"a\nb\nc", method="POST"
            )
            urllib.request.urlopen(request, timeout=10).close()
            for _ in range(3):
                frame = consumer.read(skip_heartbeats=True)
                consumer.send(Fin(frame.message_id))
            consumer.send(b"NOP\n")
            url = f"http://{daemon.http_address}/metrics"
            with urllib.request.urlopen(url, timeout=10) as reply:
                text = reply.read().decode()
        finally:
            consumer.close()
    finally:
        daemon.stop()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_dashboard_metric_is_exported(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    wanted = set().union(*(metric_names(q) for q in queries(dashboard)))
    assert "nsq_channel_depth" in wanted  # the parse found the queries
    exported = scrape_after_traffic(tmp_path)
    missing = sorted(wanted - exported)
    assert not missing, f"the dashboard queries metrics /metrics does not export: {missing}"
