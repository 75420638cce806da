#!/usr/bin/env python3
"""A flame graph and a text summary of one py-spy profile (python stdlib only; used by
scripts/bench --profile).

Usage:
  profile_report.py RAW --svg OUT.svg --summary OUT.txt [--title TITLE] [--top N]

RAW is what ``py-spy record --format raw`` writes: collapsed stacks, one line per distinct
stack, its frames from the outermost to the innermost separated by ";", then a space and the
number of samples in which the process was in that stack (py-spy leaves idle threads out unless
it ran with --idle, so a sample is a moment the process was working). A frame is named as
py-spy names it, "function (file:line)"; with py-spy's --function the line is the function's
first line, so one name is one function.

The SVG is an icicle graph: the outermost frames on top, each frame's callees below it, a
frame's width its share of the samples, callees ordered widest first. Hovering a frame shows
its samples; pnsq's own code (the packages nsqd, lookupd, protocol and pnsq) is drawn in warm
colours, everything else (Trio, the standard library) in cool ones. Frames narrower than
0.1 px are left out (their samples still count in their callers' widths).

The summary lists the functions with the most samples of their own ("self": the function was
the innermost frame) and the most samples in which they were anywhere on the stack
("inclusive": the function or something it called was running; a recursive function counts
once per sample).

Exits 1 (saying why on stderr) when RAW is not collapsed stacks.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

OWN_PACKAGES = ("nsqd/", "lookupd/", "protocol/", "pnsq/")

WIDTH = 1200  # px, the whole image
PAD = 10  # px left and right of the frames
ROW = 17  # px per stack level
TOP = 60  # px above the first level: title and subtitle
CHAR = 7.0  # px per character of the 12 px monospace labels
MIN_FRAME = 0.1  # px: narrower frames are left out


@dataclass
class Node:
    """One frame in one calling context: its samples (its own and its callees') and its
    callees by name."""

    name: str
    samples: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def parse(text: str) -> list[tuple[list[str], int]]:
    """The (frames outermost first, samples) of each line of collapsed stacks. ValueError
    naming the line if one is not "FRAME;FRAME;... COUNT"."""
    stacks = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            raise ValueError(f"line {number} is not 'frames count': {line[:120]!r}")
        stacks.append((stack.split(";"), int(count)))
    return stacks


def tree(stacks: list[tuple[list[str], int]]) -> Node:
    """The calling-context tree of ``stacks`` under a root named "all"."""
    root = Node("all")
    for frames, count in stacks:
        root.samples += count
        node = root
        for name in frames:
            node = node.children.setdefault(name, Node(name))
            node.samples += count
    return root


def totals(stacks: list[tuple[list[str], int]]) -> tuple[Counter[str], Counter[str]]:
    """Samples per function: (self, inclusive)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks:
        if frames:
            own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return own, inclusive


def summary(stacks: list[tuple[list[str], int]], title: str, top: int) -> str:
    """The text summary: total samples, then the ``top`` functions by self and by inclusive
    samples, each with its share of all samples (ties in name order)."""
    own, inclusive = totals(stacks)
    total = sum(count for _, count in stacks)
    lines = [title, f"samples: {total}"]
    if not total:
        return "\n".join([*lines, "no samples: the process never ran during the window", ""])
    for label, first, second in (
        ("self", own, inclusive),
        ("inclusive", inclusive, own),
    ):
        other = "inclusive" if label == "self" else "self"
        lines += ["", f"top {top} by {label} samples:", f"{label:>10} {other:>10}  function"]
        for name, count in sorted(first.items(), key=lambda item: (-item[1], item[0]))[:top]:
            lines.append(f"{100 * count / total:9.1f}% {100 * second[name] / total:9.1f}%  {name}")
    return "\n".join([*lines, ""])


def colour(name: str) -> str:
    """A fill for a frame, stable per name: warm for pnsq's own code, cool otherwise."""
    digest = hashlib.blake2s(name.encode(), digest_size=3).digest()
    a, b, c = digest
    if any(f"({package}" in name for package in OWN_PACKAGES):
        return f"rgb({205 + a % 50},{80 + b % 120},{c % 55})"
    return f"rgb({60 + a % 40},{130 + b % 60},{170 + c % 60})"


def svg(root: Node, title: str) -> str:
    """The icicle graph of ``root`` as an SVG document."""
    scale = (WIDTH - 2 * PAD) / root.samples if root.samples else 0.0
    frames: list[str] = []
    depth = 0

    def draw(node: Node, x: float, level: int) -> None:
        nonlocal depth
        width = node.samples * scale
        if width < MIN_FRAME:
            return
        depth = max(depth, level)
        y = TOP + level * ROW
        share = 100 * node.samples / root.samples
        own = node.samples - sum(child.samples for child in node.children.values())
        label = f"{node.name}: {node.samples} samples ({share:.2f}%), {own} of its own"
        text = ""
        chars = int((width - 6) / CHAR)
        if chars >= 3:
            shown = node.name if len(node.name) <= chars else node.name[: chars - 2] + ".."
            text = f'<text x="{x + 3:.1f}" y="{y + 12}">{escape(shown)}</text>'
        frames.append(
            f"<g><title>{escape(label)}</title>"
            f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{ROW - 1}" '
            f"fill={quoteattr(colour(node.name))}/>{text}</g>"
        )
        for child in sorted(node.children.values(), key=lambda n: (-n.samples, n.name)):
            draw(child, x, level + 1)
            x += child.samples * scale

    if root.samples:
        draw(root, PAD, 0)
        subtitle = f"{root.samples} samples; hover a frame for its samples"
    else:
        subtitle = "no samples: the process never ran during the window"
    height = TOP + (depth + 1) * ROW + PAD
    return "\n".join(
        [
            '<?xml version="1.0" standalone="no"?>',
            f'<svg version="1.1" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" xmlns="http://www.w3.org/2000/svg">',
            "<style>text { font-family: monospace; font-size: 12px; }"
            " .head { text-anchor: middle; } rect { stroke: white; stroke-width: 0.5; }</style>",
            f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#f8f8f4"/>',
            f'<text class="head" x="{WIDTH / 2}" y="22" style="font-size: 16px">'
            f"{escape(title)}</text>",
            f'<text class="head" x="{WIDTH / 2}" y="42">{escape(subtitle)}</text>',
            *frames,
            "</svg>",
            "",
        ]
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", help="py-spy's collapsed stacks (record --format raw)")
    parser.add_argument("--svg", required=True, help="flame graph to write")
    parser.add_argument("--summary", required=True, help="text summary to write")
    parser.add_argument("--title", default="", help="heading of both (default: RAW's name)")
    parser.add_argument("--top", type=int, default=25, help="functions per list (default 25)")
    args = parser.parse_args(argv)
    title = args.title or Path(args.raw).name
    try:
        stacks = parse(Path(args.raw).read_text())
        Path(args.svg).write_text(svg(tree(stacks), title))
        Path(args.summary).write_text(summary(stacks, title, args.top))
    except (OSError, ValueError) as exc:
        print(f"profile_report: {args.raw}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
