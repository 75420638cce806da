"""Rules of DESIGN.md that import-linter cannot see, checked on the source tree.

* The broker is the one gate over topics: outside ``nsqd/broker`` nobody reaches into
  ``broker.topics``; they ask ``find_topic``/``list_topics``.
* One clock: nsqd's domain code and shells read time only through the broker's clock (or a
  clock callable they are given), never ``time.*`` or ``trio.current_time`` directly.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: modules allowed to read a clock directly: the clock itself, and the GC pause probe (which
#: measures the interpreter, not the domain)
CLOCK_READERS = {"nsqd/broker/clock.py", "nsqd/observe/memory.py"}

TIME_READS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}


def _modules(package: str) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        yield rel, ast.parse(path.read_text(), rel)


def test_only_the_broker_touches_its_topic_table() -> None:
    offenders = []
    for rel, tree in _modules("nsqd"):
        if rel.startswith("nsqd/broker/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "topics":
                offenders.append(f"{rel}:{node.lineno}")
    assert offenders == []


def _clock_reads(tree: ast.Module) -> Iterator[int]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        if not isinstance(owner, ast.Name):
            continue
        if owner.id == "time" and node.func.attr in TIME_READS:
            yield node.lineno
        if owner.id == "trio" and node.func.attr == "current_time":
            yield node.lineno


def test_time_is_read_through_the_one_clock() -> None:
    offenders = [
        f"{rel}:{line}"
        for rel, tree in _modules("nsqd")
        if rel not in CLOCK_READERS
        for line in _clock_reads(tree)
    ]
    assert offenders == []


def test_the_rule_sees_a_direct_read() -> None:
    """The checker itself: a direct read is found (so an empty list above means something)."""
    tree = ast.parse("import time, trio\nx = time.time()\ny = trio.current_time()\n")
    assert list(_clock_reads(tree)) == [2, 3]
