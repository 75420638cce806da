"""The random-flip soak (:mod:`tests.fuzz.flips`) for a few rounds: standalone restarts with a
random byte flipped in random files of every kind, and a replicated leader whose segment bytes
rot while it runs. ``scripts/fuzz --flips --replica --seconds 1800`` is the long run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.flips import main

pytestmark = pytest.mark.integration


def test_a_few_rounds_of_random_flips_lose_and_corrupt_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--flips", "--replica", "--rounds", "4", "--seed", "7", "--save", str(tmp_path)]
    assert main(argv) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    figures = {
        name.strip(): int(value)
        for name, value in (line.rsplit(":", 1) for line in out.splitlines() if line[:2] == "  ")
    }
    assert (figures["rounds"], figures["standalone rounds"], figures["replica rounds"]) == (4, 2, 2)
    assert figures["corrupt deliveries"] == 0
    # each replica round's hit record came back from the replica, unless its copy was hit too
    assert figures.get("healed", 0) + figures.get("skipped (both copies hit)", 0) == 2
    assert figures.get("healed", 0) >= 1


@pytest.mark.slow
@pytest.mark.fault
@pytest.mark.timeout(400)
def test_random_flips_for_a_few_minutes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--flips", "--replica", "--seconds", "180", "--seed", "11", "--save", str(tmp_path)]
    assert main(argv) == 0, capsys.readouterr().out
