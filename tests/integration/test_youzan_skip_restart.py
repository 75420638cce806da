"""youzan's channel skip flags (``/channel/skip``, ``/channel/skipZanTest``) are saved before
the reply and survive ``kill -9``: a skipped channel still confirms every message unsent after
the restart, a zan_test-skipping channel still drops the zan_test messages; unskipping is saved
the same way."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from tests.daemons import Daemon, pnsq_nsqd
from tests.rawclient import RawClient
from tests.youzan import decode, fin, get_json, next_message, post

pytestmark = pytest.mark.integration


def _channels(d: Daemon) -> dict[str, dict[str, object]]:
    stats = get_json(d.http_address, "/stats?format=json&topic=yzt")
    assert isinstance(stats, dict)
    return {c["channel_name"]: c for c in stats["topics"][0]["channels"]}


def _pub_ext(d: Daemon, body: bytes, header: dict[str, str]) -> None:
    query = urllib.parse.quote(json.dumps(header))
    assert post(d.http_address, f"/pub_ext?topic=yzt&ext={query}", body) == (200, b"OK")


def _received(d: Daemon, channel: str) -> list[bytes]:
    """Bodies ``channel`` delivers until nothing comes for a second, each FINed."""
    client = RawClient(d.tcp_address, timeout=1.0)
    client.identify(extend_support=True)
    client.send(b"SUB yzt %s 0\n" % channel.encode(), b"RDY 100\n")
    assert client.read().data == b"OK"
    bodies = []
    try:
        while True:
            message = decode(next_message(client), ext=True)
            bodies.append(message.body)
            fin(client, message.message_id)
    except TimeoutError:
        return bodies
    finally:
        client.close()


def test_skip_flags_survive_a_restart(tmp_path: Path) -> None:
    d = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        creator = RawClient(d.tcp_address)
        creator.send(b"INTERNAL_CREATE_TOPIC yzt 0 true\n")
        assert creator.read().data == b"OK"
        creator.close()
        for name in ("skipped", "zt", "plain"):
            assert post(d.http_address, f"/channel/create?topic=yzt&channel={name}")[0] == 200
        assert post(d.http_address, "/channel/skip?topic=yzt&channel=skipped") == (200, b"")
        assert post(d.http_address, "/channel/skipZanTest?topic=yzt&channel=zt") == (200, b"")
        d.kill()  # the flags were saved before the replies
        d.start()
        channels = _channels(d)
        assert (channels["skipped"]["skipped"], channels["skipped"]["zan_test_skipped"]) == (
            True,
            False,
        )
        assert (channels["zt"]["skipped"], channels["zt"]["zan_test_skipped"]) == (False, True)
        assert (channels["plain"]["skipped"], channels["plain"]["zan_test_skipped"]) == (
            False,
            False,
        )
        _pub_ext(d, b"test", {"zan_test": "true"})
        _pub_ext(d, b"real", {"k": "v"})
        assert _received(d, "skipped") == []
        assert _received(d, "zt") == [b"real"]
        assert _received(d, "plain") == [b"test", b"real"]

        assert post(d.http_address, "/channel/unskip?topic=yzt&channel=skipped") == (200, b"")
        assert post(d.http_address, "/channel/unskipZanTest?topic=yzt&channel=zt") == (200, b"")
        d.kill()
        d.start()
        channels = _channels(d)
        assert [
            (channels[n]["skipped"], channels[n]["zan_test_skipped"]) for n in ("skipped", "zt")
        ] == [(False, False), (False, False)]
        _pub_ext(d, b"again", {"zan_test": "true"})
        assert _received(d, "skipped") == [b"again"]
        assert _received(d, "zt") == [b"again"]
    finally:
        d.stop()
