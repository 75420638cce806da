"""Fixtures the unit tests of more than one module share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nsqd.storage import PartitionLog


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[Callable[..., PartitionLog]]:
    """Open partition logs in ``tmp_path / "p"`` (partition 2 unless given); closed after."""
    logs: list[PartitionLog] = []

    def opener(**kwargs: object) -> PartitionLog:
        kwargs.setdefault("partition", 2)
        log = PartitionLog.open(tmp_path / "p", **kwargs)  # type: ignore[arg-type]
        logs.append(log)
        return log

    try:
        yield opener
    finally:
        for log in logs:
            log.close()
