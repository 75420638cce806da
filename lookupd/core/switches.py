"""The cluster's switches an operator sets on lookupd: automatic balancing
(``/cluster/balance``) and the rolling upgrade (``/cluster/upgrade/begin`` and ``/done``). They
are saved with the placements, so a lookupd restart or another lookupd taking over keeps them.
Pure: no I/O, no clock, no Trio.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Switches:
    """What the operator switched; ``Switches()``: nothing (the flags' defaults hold)."""

    #: ``/cluster/balance?enable=``; None: never set, lookupd's ``--auto-balance`` decides
    balance: bool | None = None
    #: wall time of ``/cluster/upgrade/begin``; None: no upgrade in progress
    upgrading_since: float | None = None

    def balancing(self, default: bool) -> bool:
        """Whether lookupd balances by itself: the switch, else ``default`` (the flag); never
        during an upgrade (a restarting node would be emptied, then filled again)."""
        enabled = default if self.balance is None else self.balance
        return enabled and self.upgrading_since is None

    def to_values(self) -> dict[str, str]:
        """The form saved (the file's ``switches`` object, one etcd key each): only what is
        set."""
        values = {}
        if self.balance is not None:
            values["balance"] = "true" if self.balance else "false"
        if self.upgrading_since is not None:
            values["upgrading_since"] = repr(float(self.upgrading_since))
        return values

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> Switches:
        """Read :meth:`to_values` (unknown names are ignored: a newer lookupd's); raises
        ValueError for a value that is not one."""
        balance = values.get("balance")
        if balance not in (None, "true", "false"):
            raise ValueError(f"switch balance is not true or false: {balance!r}")
        since = values.get("upgrading_since")
        return cls(
            None if balance is None else balance == "true",
            None if since is None else float(str(since)),
        )
