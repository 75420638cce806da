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


# ---------------------------------------------------------------------------------- import circles

PACKAGES = ("protocol", "nsqd", "lookupd", "pnsq")


def _module_name(path: Path) -> tuple[str, bool]:
    """The dotted name of the module at ``path`` and whether it is a package's ``__init__``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def import_graph(sources: dict[str, tuple[bool, ast.Module]]) -> dict[str, set[str]]:
    """Module -> the modules of ``sources`` it imports, with every import counted: those under
    ``if TYPE_CHECKING:`` and inside functions too. ``from pkg import name`` imports the
    submodule ``pkg.name`` if there is one, else ``pkg`` itself (its ``__init__``)."""
    graph: dict[str, set[str]] = {name: set() for name in sources}
    for name, (is_package, tree) in sources.items():
        package = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    submodule = f"{target}.{alias.name}"
                    targets.append(submodule if submodule in sources else target)
            for target in targets:
                parts = target.split(".")
                found = next(
                    (
                        m
                        for end in range(len(parts), 0, -1)
                        if (m := ".".join(parts[:end])) in sources
                    ),
                    None,
                )
                if found is not None and found != name:
                    graph[name].add(found)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of more than one
    module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _package_sources() -> dict[str, tuple[bool, ast.Module]]:
    sources = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name, is_package = _module_name(path)
            sources[name] = (is_package, ast.parse(path.read_text(), path.as_posix()))
    return sources


def test_no_import_circles() -> None:
    """Imports point one way, everywhere: a helper gets a Protocol, a callback or a small
    context, never its parent (which imports it)."""
    assert circles(import_graph(_package_sources())) == []


def test_the_circle_rule_sees_circles() -> None:
    """The checker itself: a back-reference under TYPE_CHECKING, and a name taken from the
    ``__init__`` of a package that imports the taker, are circles; a sibling submodule taken
    from the package is not."""
    code = {
        "p": (True, "from .a import A\n"),
        "p.a": (
            False,
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        ),
        "p.b": (False, "from .a import A\n"),
        "q": (True, "from .c import C\nfrom .d import D\n"),
        "q.c": (False, "def f():\n    from q import D, d\n"),
        "q.d": (False, "import os\nD = 1\n"),
        "r": (True, ""),
        "r.e": (False, "from . import f\n"),
        "r.f": (False, "import r.g\n"),
        "r.g": (False, ""),
    }
    sources = {name: (pkg, ast.parse(text)) for name, (pkg, text) in code.items()}
    assert circles(import_graph(sources)) == [["p.a", "p.b"], ["q", "q.c"]]


# ---------------------------------------------------------------------------------- no silent skips

#: the only skips allowed: tests of a pnsq extension, skipped when the suite runs against Go nsqd
ALLOWED_SKIPS = {"tests/integration/test_client.py"}


def _skips(tree: ast.Module) -> Iterator[int]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("skip", "skipif", "importorskip"):
            if isinstance(node.value, ast.Name) and node.value.id == "pytest":
                yield node.lineno
            if isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
                yield node.lineno


def test_no_test_skips_for_a_missing_peer() -> None:
    """scripts/setup installs every peer the tests need (Go nsqd, Spark and Java, Prometheus,
    etcd): a missing one fails its tests instead of skipping them."""
    offenders = [
        f"{rel}:{line}"
        for rel, tree in _modules("tests")
        if rel not in ALLOWED_SKIPS
        for line in _skips(tree)
    ]
    assert offenders == []


def test_the_skip_rule_sees_skips() -> None:
    tree = ast.parse(
        "import pytest\n@pytest.mark.skipif(True, reason='x')\ndef t(): pytest.skip('y')\n"
    )
    assert sorted(_skips(tree)) == [2, 3]
