"""scripts/bench --profile's views of a py-spy profile: a summary of the functions with the most
self and inclusive samples, and a flame graph (scripts/profile_report.py, stdlib only, loaded
from its path)."""

from __future__ import annotations

import importlib.util
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "profile_report.py"
SVG = "{http://www.w3.org/2000/svg}"

# py-spy's raw format: frames outermost first, then the samples of that stack. rec calls
# itself; <module> needs escaping in XML.
MAIN = "<module> (nsqd:1);main (nsqd/cli.py:15)"
SEND = "_send (pnsq/_netio/plain_stream.py:73)"
COLLAPSED = f"""\
{MAIN};Session.run (nsqd/tcp/session.py:143);{SEND} 60
{MAIN};Session.run (nsqd/tcp/session.py:143) 10
{MAIN};rec (nsqd/x.py:1);rec (nsqd/x.py:1);{SEND} 20
Thread.run (threading.py:971);get_events (trio/_core/_io_epoll.py:238) 10
"""


@pytest.fixture(scope="module")
def report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("profile_report", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["profile_report"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run(report: ModuleType, tmp_path: Path, text: str) -> tuple[str, ET.Element]:
    raw = tmp_path / "w-nsqd.folded"
    raw.write_text(text)
    svg, summary = tmp_path / "w.svg", tmp_path / "w.txt"
    argv = [str(raw), "--svg", str(svg), "--summary", str(summary), "--title", "w <nsqd>"]
    assert report.main(argv) == 0
    return summary.read_text(), ET.parse(svg).getroot()


def listed(summary: str, heading: str) -> list[tuple[float, float, str]]:
    """The (first %, second %, function) rows under ``heading`` in the summary."""
    section = summary.split(heading, 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\s*([\d.]+)%\s+([\d.]+)%  (.+)$", section, re.MULTILINE)
    return [(float(a), float(b), name) for a, b, name in rows]


def test_summary_ranks_functions_by_self_and_by_inclusive_samples(
    report: ModuleType, tmp_path: Path
) -> None:
    summary, _ = run(report, tmp_path, COLLAPSED)
    assert summary.startswith("w <nsqd>\nsamples: 100\n")
    by_self = listed(summary, "top 25 by self samples:")
    assert by_self[:3] == [
        (80.0, 80.0, "_send (pnsq/_netio/plain_stream.py:73)"),
        (10.0, 70.0, "Session.run (nsqd/tcp/session.py:143)"),
        (10.0, 10.0, "get_events (trio/_core/_io_epoll.py:238)"),
    ]
    by_inclusive = {name: (incl, own) for incl, own, name in listed(summary, "inclusive samples:")}
    assert by_inclusive["<module> (nsqd:1)"] == (90.0, 0.0)
    assert by_inclusive["Session.run (nsqd/tcp/session.py:143)"] == (70.0, 10.0)
    # a recursive function counts once per sample, not once per frame
    assert by_inclusive["rec (nsqd/x.py:1)"] == (20.0, 0.0)
    assert next(iter(by_inclusive)) == "<module> (nsqd:1)"


def test_flame_graph_widths_follow_the_samples_per_calling_context(
    report: ModuleType, tmp_path: Path
) -> None:
    _, root = run(report, tmp_path, COLLAPSED)
    frames: dict[str, list[tuple[float, float, float]]] = {}
    for group in root.iter(f"{SVG}g"):
        title = group.findtext(f"{SVG}title")
        rect = group.find(f"{SVG}rect")
        assert title is not None
        assert rect is not None
        name = title.split(": ", 1)[0]
        box = (float(rect.get("x", "")), float(rect.get("y", "")), float(rect.get("width", "")))
        frames.setdefault(name, []).append(box)
    all_x, _, full = frames["all"][0]
    (session,) = frames["Session.run (nsqd/tcp/session.py:143)"]
    assert session[2] == pytest.approx(full * 0.7, abs=0.1)
    # _send appears twice: under Session.run and under the inner rec, one level deeper
    sends = sorted(frames["_send (pnsq/_netio/plain_stream.py:73)"], key=lambda box: box[1])
    assert [round(box[2] / full, 2) for box in sends] == [0.6, 0.2]
    level = session[1] - frames["main (nsqd/cli.py:15)"][0][1]
    assert level > 0
    assert sends[1][1] - sends[0][1] == level
    # the icicle: each level below its caller, the widest callee first
    assert session[0] == all_x
    assert frames["rec (nsqd/x.py:1)"][0][0] == pytest.approx(all_x + full * 0.7, abs=0.1)
    titles = [g.findtext(f"{SVG}title") for g in root.iter(f"{SVG}g")]
    assert "Session.run (nsqd/tcp/session.py:143): 70 samples (70.00%), 10 of its own" in titles
    # pnsq's own frames warm (red channel high), the others cool (blue channel high)
    fills = {
        g.findtext(f"{SVG}title", "").split(": ")[0]: rect.get("fill", "")
        for g in root.iter(f"{SVG}g")
        if (rect := g.find(f"{SVG}rect")) is not None
    }
    red, _, blue = map(int, re.findall(r"\d+", fills["Session.run (nsqd/tcp/session.py:143)"]))
    assert red > 200 > blue
    red, _, blue = map(int, re.findall(r"\d+", fills["Thread.run (threading.py:971)"]))
    assert blue > 160 > red


def test_frames_narrower_than_a_tenth_of_a_pixel_are_left_out(
    report: ModuleType, tmp_path: Path
) -> None:
    # tiny: 1 sample in 100,001, narrower than 0.1 px
    text = (
        "main (nsqd/cli.py:15);busy (nsqd/a.py:1) 100000\n"
        "main (nsqd/cli.py:15);tiny (nsqd/b.py:1) 1\n"
    )
    summary, root = run(report, tmp_path, text)
    titles = " ".join(g.findtext(f"{SVG}title", "") for g in root.iter(f"{SVG}g"))
    assert "busy (nsqd/a.py:1)" in titles
    assert "tiny" not in titles
    assert "main (nsqd/cli.py:15): 100001 samples" in titles
    assert "tiny (nsqd/b.py:1)" in summary  # the summary still lists it


def test_no_samples_and_bad_input(report: ModuleType, tmp_path: Path) -> None:
    summary, root = run(report, tmp_path, "")
    assert "samples: 0\nno samples" in summary
    assert root.findall(f"{SVG}g") == []
    raw = tmp_path / "bad.folded"
    raw.write_text("main (nsqd/cli.py:15) 3\nnot a stack line\n")
    argv = [str(raw), "--svg", str(tmp_path / "b.svg"), "--summary", str(tmp_path / "b.txt")]
    assert report.main(argv) == 1
