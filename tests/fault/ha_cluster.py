"""The fault suite's cluster with nsqlookupd HA: a real etcd (:mod:`tests.etcd`), two pnsq
lookupds on it (``--cluster-id``, ``--cluster-leadership-addresses``) and three nsqd, each
given both lookupds (``--lookupd-tcp-address`` twice).

Each lookupd reaches etcd through its own :class:`~tests.fault.linkcut.Link`, so a test can cut
one lookupd (or both) off from etcd while etcd runs on. Who leads is read from the lookupds'
``/listlookup`` and, with the time it happened, from their logs (``election: this lookupd is
the leader`` / ``election: no longer the leader``, stamped to the millisecond).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

from tests.daemons import Daemon, pnsq_lookupd
from tests.etcd import Etcd
from tests.fault.harness import FaultCluster
from tests.fault.linkcut import Link
from tests.integration.lookupd_helpers import free_port, get_json, post, wait_for

CLUSTER_ID = "faults"
LEADS = "this lookupd is the leader"
STEPS_DOWN = "no longer the leader"
_ELECTION = re.compile(
    r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+: election: "
    rf"({LEADS}|{STEPS_DOWN})"
)


class HAFaultCluster(FaultCluster):
    """etcd + two HA lookupds + ``count`` nsqd registered with both (see the module doc)."""

    def __init__(
        self, work: Path, count: int = 3, nsqd_flags: tuple[str, ...] = (), racks: bool = False
    ) -> None:
        self.etcd = Etcd(work / "etcd").start()
        #: per lookupd (same order as ``lookupds``): its link to etcd
        self.etcd_links: list[Link] = []
        self.lookupds: list[Daemon] = []
        self.nodes: list[Daemon] = []
        try:
            super().__init__(work, count, nsqd_flags=nsqd_flags, racks=racks)
            self.lookupd_leader()
        except BaseException:
            self.stop()
            raise

    def _start_lookupds(self, work: Path, flags: tuple[str, ...]) -> list[Daemon]:
        for i in (1, 2):
            link = Link(("127.0.0.1", self.etcd.client_port))
            self.etcd_links.append(link)
            lookupd = pnsq_lookupd(
                work / f"lookupd{i}",
                f"--tcp-address=127.0.0.1:{free_port()}",
                f"--http-address=127.0.0.1:{free_port()}",
                "--heartbeat-timeout=2s",
                f"--cluster-id={CLUSTER_ID}",
                f"--cluster-leadership-addresses=http://{link.address}",
                *flags,
            )
            self.lookupds.append(lookupd.start())
        return self.lookupds

    # ------------------------------------------------------------------ who leads

    def listed_leader(self, lookupd: Daemon) -> Daemon | None:
        """The lookupd that ``lookupd``'s ``/listlookup`` names as the leader (None: none, or
        ``lookupd`` does not answer)."""
        try:
            leader = get_json(lookupd, "/listlookup")["lookupdleader"]
        except (AssertionError, OSError):
            return None
        if not leader:
            return None
        return next((d for d in self.lookupds if leader["ID"].endswith(f":{d.tcp_port}")), None)

    def lookupd_leader(self, timeout: float = 30.0) -> Daemon:
        """The leader every running lookupd names (waits for one that leads, by its log)."""

        def agreed() -> Daemon | None:
            running = [d for d in self.lookupds if d.proc is not None and d.proc.poll() is None]
            named = {id(self.listed_leader(d)): self.listed_leader(d) for d in running}
            leader = named.popitem()[1] if len(named) == 1 else None
            return leader if leader is not None and leading(leader) else None

        return wait_for(agreed, timeout=timeout, what="one leader lookupd")

    def lookupd_follower(self) -> Daemon:
        leader = self.lookupd_leader()
        return next(d for d in self.lookupds if d is not leader)

    def etcd_link(self, lookupd: Daemon) -> Link:
        return self.etcd_links[self.lookupds.index(lookupd)]

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Every running node registered with every running lookupd."""
        alive = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        for lookupd in self.lookupds:
            wait_for(
                lambda d=lookupd: len(get_json(d, "/nodes")["producers"]) == len(alive),
                timeout=timeout,
                what=f"{len(alive)} nodes registered",
            )

    def write(self, lookupd: Daemon, topic: str) -> tuple[int, str]:
        """A metadata write (``/topic/create``) on ``lookupd``: its status and message."""
        status, body = post(lookupd, f"/topic/create?topic={topic}&partition_num=1")
        try:
            message = json.loads(body).get("message", "") if body else ""
        except ValueError:
            message = body.decode(errors="replace")
        return status, str(message)

    def stop(self) -> None:
        super().stop()
        self.etcd.stop()
        for link in self.etcd_links:
            link.close()


def election_events(lookupd: Daemon) -> list[tuple[float, str]]:
    """``(wall-clock time, LEADS or STEPS_DOWN)`` for every election line in its log."""
    events = []
    for match in _ELECTION.finditer(lookupd.log_text()):
        stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f")  # local time, as logged
        events.append((stamp.timestamp(), match[2]))
    return events


def leading(lookupd: Daemon) -> bool:
    """Its log's last election line says it leads."""
    events = election_events(lookupd)
    return bool(events) and events[-1][1] == LEADS


def first_after(lookupd: Daemon, what: str, since: float) -> float | None:
    """The wall-clock time of the first ``what`` (LEADS or STEPS_DOWN) logged after ``since``."""
    return next(
        (at for at, event in election_events(lookupd) if event == what and at > since), None
    )
