"""Shared fixtures: real daemons on loopback, torn down after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import Daemon, go_nsqd, pnsq_nsqd


@pytest.fixture
def nsqd(tmp_path: Path) -> Iterator[Daemon]:
    """A fresh pnsq nsqd with its own data directory."""
    daemon = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def real_nsqd(tmp_path: Path) -> Iterator[Daemon]:
    """A fresh Go nsqd 1.3.0, for checking expectations against the real peer."""
    daemon = go_nsqd(tmp_path / "go-nsqd").start()
    try:
        yield daemon
    finally:
        daemon.stop()
