"""Command lines for yzgonsq-interop (tests/interop/youzan), the partition-aware client that
behaves as youzan's go-nsq: producer and consumer through nsqlookupd's partition map."""

from __future__ import annotations

from tests.daemons import TOOLS
from tests.interop.drivers import Driver, Run

YZGONSQ_INTEROP = TOOLS / "bin" / "yzgonsq-interop"


def _base(sub: str) -> list[str]:
    if not YZGONSQ_INTEROP.exists():
        raise RuntimeError(f"{YZGONSQ_INTEROP} missing: run scripts/setup")
    return [str(YZGONSQ_INTEROP), sub]


def yz_pub_argv(
    lookupd: str,
    topic: str,
    count: int,
    *,
    keys: int = 0,
    prefix: str = "msg-",
    stale_leader: str = "",
) -> list[str]:
    """Publish ``count`` bodies ``<prefix><i>`` to the partition leaders ``lookupd`` lists;
    with ``keys`` > 0 body i carries the sharding key ``key-<i % keys>``; with
    ``stale_leader`` (an nsqd TCP address) the producer starts from a partition map naming that
    node as every partition's leader, and must be refused and look up again."""
    argv = [*_base("pub"), "-lookupd", lookupd, "-topic", topic, "-count", str(count)]
    argv += ["-keys", str(keys), "-prefix", prefix, "-timeout", "40s"]
    return argv + (["-stale-leader", stale_leader] if stale_leader else [])


def yz_sub_argv(
    lookupd: str, topic: str, channel: str, count: int, *, ordered: bool = False
) -> list[str]:
    """Consume until ``count`` distinct bodies arrived, one connection per partition leader."""
    argv = [*_base("sub"), "-lookupd", lookupd, "-topic", topic, "-channel", channel]
    argv += ["-count", str(count), "-timeout", "40s"]
    return argv + (["-ordered"] if ordered else [])


def run_yz(argv: list[str], timeout: float = 60) -> Run:
    """Run one yzgonsq-interop command to its end and parse its JSON lines."""
    return Driver("youzan").run(argv, timeout)
