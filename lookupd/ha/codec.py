"""etcd v3's JSON gateway, the pure parts: the key layout of one pnsq cluster in etcd, the
request bodies lookupd sends and the replies it reads, and the diff of two metadata snapshots
that becomes one compare-and-swap transaction. No I/O, no Trio: :mod:`lookupd.ha.leadership.etcd`
sends these.

The gateway speaks proto3 JSON: keys and values are base64, 64-bit integers are strings, zero
values (``succeeded: false``, ``TTL: 0``, an empty ``kvs``) are left out.

Layout under ``/pnsq/<cluster-id>/``:

* ``topics/<name>`` — a topic's placement (:func:`lookupd.core.placement.to_document` JSON):
  meta, partitions, leaders, replicas, in-sync sets, epochs;
* ``deleted/<name>`` — a deleted topic's tombstone (the wall time of the deletion);
* ``removing/<node>`` — a node being drained (the wall time it was asked);
* ``switches/<name>`` — an operator's switch (:class:`~lookupd.core.switches.Switches`);
* ``leader`` — the elected lookupd (its :class:`NodeInfo` JSON), attached to its lease;
* ``lookupds/<id>`` — every live lookupd (its :class:`NodeInfo` JSON), each on its own lease.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.placement import from_document
from ..core.switches import Switches
from ..state.store import Stored

TOPICS = "topics/"
DELETED = "deleted/"
REMOVING = "removing/"
SWITCHES = "switches/"
#: the prefixes of the metadata keys (:func:`encode_stored`)
METADATA = (TOPICS, DELETED, REMOVING, SWITCHES)
LEADER = "leader"
LOOKUPDS = "lookupds/"
#: etcd refuses a transaction with more operations (its --max-txn-ops default is 128)
MAX_TXN_KEYS = 60


class EtcdReplyError(ValueError):
    """A gateway reply lookupd cannot read."""


def b64(text: str | bytes) -> str:
    """Base64 of ``text`` (UTF-8)."""
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode("ascii")


def unb64(text: object) -> bytes:
    """The bytes of a base64 field (``b""`` for an absent one)."""
    if text is None:
        return b""
    if not isinstance(text, str):
        raise EtcdReplyError(f"not base64 text: {text!r}")
    return base64.b64decode(text)


def prefix_end(prefix: str) -> str:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return raw.decode()


def cluster_prefix(cluster_id: str) -> str:
    """``/pnsq/<cluster-id>/``: every key of one cluster."""
    return f"/pnsq/{cluster_id}/"


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as the gateway returns it."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


def parse_kv(raw: Mapping[str, Any]) -> KeyValue:
    """A ``kvs`` entry."""
    return KeyValue(
        unb64(raw.get("key")).decode(),
        unb64(raw.get("value")),
        int(raw.get("create_revision", 0)),
        int(raw.get("mod_revision", 0)),
        int(raw.get("lease", 0)),
    )


def parse_range(reply: Mapping[str, Any]) -> tuple[list[KeyValue], int]:
    """``/v3/kv/range``'s keys and the store revision it read at."""
    try:
        kvs = [parse_kv(kv) for kv in reply.get("kvs", [])]
        return kvs, int(reply["header"]["revision"])
    except (KeyError, TypeError, ValueError) as exc:
        raise EtcdReplyError(f"range reply: {exc}") from exc


def range_request(key: str, *, prefix: bool = False) -> dict[str, str]:
    """The body of ``/v3/kv/range`` for ``key`` (or every key under it)."""
    body = {"key": b64(key)}
    if prefix:
        body["range_end"] = b64(prefix_end(key))
    return body


def compare_mod(key: str, revision: int) -> dict[str, str]:
    """A txn compare: ``key`` was last written at ``revision`` (0: it does not exist)."""
    return {"target": "MOD", "key": b64(key), "result": "EQUAL", "mod_revision": str(revision)}


def compare_create(key: str, revision: int) -> dict[str, str]:
    """A txn compare: ``key`` was created at ``revision`` (0: it does not exist)."""
    return {
        "target": "CREATE",
        "key": b64(key),
        "result": "EQUAL",
        "create_revision": str(revision),
    }


def put_op(key: str, value: bytes, lease: int = 0) -> dict[str, Any]:
    """A txn ``request_put``."""
    put: dict[str, str] = {"key": b64(key), "value": b64(value)}
    if lease:
        put["lease"] = str(lease)
    return {"request_put": put}


def delete_op(key: str) -> dict[str, Any]:
    """A txn ``request_delete_range`` of one key."""
    return {"request_delete_range": {"key": b64(key)}}


def parse_txn(reply: Mapping[str, Any]) -> tuple[bool, int]:
    """``/v3/kv/txn``: whether the compares held, and the revision after it."""
    try:
        return bool(reply.get("succeeded", False)), int(reply["header"]["revision"])
    except (KeyError, TypeError, ValueError) as exc:
        raise EtcdReplyError(f"txn reply: {exc}") from exc


def parse_lease(reply: Mapping[str, Any]) -> tuple[int, int]:
    """``/v3/lease/grant`` or one ``/v3/lease/keepalive`` result: ``(id, ttl)``; a TTL of 0
    means the lease is gone (expired or revoked)."""
    body = reply.get("result", reply)
    if not isinstance(body, Mapping) or "ID" not in body:
        raise EtcdReplyError(f"lease reply without an ID: {reply}")
    if body.get("error"):
        raise EtcdReplyError(f"lease: {body['error']}")
    return int(body["ID"]), int(body.get("TTL", 0))


def watch_request(prefix: str, start_revision: int) -> dict[str, Any]:
    """The body of ``/v3/watch`` for every key under ``prefix`` from ``start_revision``."""
    return {
        "create_request": {
            "key": b64(prefix),
            "range_end": b64(prefix_end(prefix)),
            "start_revision": str(start_revision),
        }
    }


def parse_watch_line(line: bytes | str) -> tuple[int, int, bool]:
    """One streamed ``/v3/watch`` message: ``(revision, events, ended)``; ``ended`` when etcd
    cancelled the watch (a compacted start revision, for one)."""
    try:
        document = json.loads(line)
    except ValueError as exc:
        raise EtcdReplyError(f"watch line: {exc}") from exc
    if "error" in document:
        raise EtcdReplyError(f"watch: {document['error']}")
    result = document.get("result", {})
    revision = int(result.get("header", {}).get("revision", 0))
    return revision, len(result.get("events", [])), bool(result.get("canceled", False))


# ---------------------------------------------------------------------- metadata <-> keys


def encode_stored(stored: Stored) -> dict[str, bytes]:
    """The relative keys and values of a metadata snapshot."""
    keys: dict[str, bytes] = {}
    for name, placement in stored.placements.items():
        keys[TOPICS + name] = placement.encoded()
    for name, when in stored.deleted.items():
        keys[DELETED + name] = repr(float(when)).encode()
    for node, when in stored.removing.items():
        keys[REMOVING + node] = repr(float(when)).encode()
    for name, value in stored.switches.to_values().items():
        keys[SWITCHES + name] = value.encode()
    return keys


def decode_stored(values: Mapping[str, bytes]) -> Stored:
    """Read :func:`encode_stored`'s keys back (other keys are ignored). Raises
    :class:`EtcdReplyError` for a value that is not pnsq's."""
    stored = Stored()
    switches: dict[str, object] = {}
    try:
        for key, value in values.items():
            if key.startswith(TOPICS):
                name = key[len(TOPICS) :]
                stored.placements[name] = from_document(name, json.loads(value))
            elif key.startswith(DELETED):
                stored.deleted[key[len(DELETED) :]] = float(value)
            elif key.startswith(REMOVING):
                stored.removing[key[len(REMOVING) :]] = float(value)
            elif key.startswith(SWITCHES):
                switches[key[len(SWITCHES) :]] = value.decode()
        stored.switches = Switches.from_values(switches)
    except (ValueError, TypeError, AttributeError) as exc:
        raise EtcdReplyError(f"metadata in etcd is not pnsq's: {key}: {exc}") from exc
    return stored


@dataclass(frozen=True, slots=True)
class Diff:
    """What changes between two snapshots: keys to put, keys to delete (relative keys)."""

    put: dict[str, bytes]
    delete: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.put or self.delete)


def diff(known: Mapping[str, bytes], wanted: Mapping[str, bytes]) -> Diff:
    """The writes that turn ``known`` into ``wanted``."""
    put = {k: v for k, v in wanted.items() if known.get(k) != v}
    return Diff(put, tuple(sorted(k for k in known if k not in wanted)))


def txn_batches(
    change: Diff,
    prefix: str,
    revisions: Mapping[str, int],
    fence: tuple[str, int] | None,
) -> list[dict[str, Any]]:
    """``change`` as transaction bodies of at most :data:`MAX_TXN_KEYS` keys. Each compares
    every key it writes with the revision lookupd last saw (``revisions``; a new key: 0), and
    ``fence`` ``(key, create_revision)`` — the leader key still being the one this lookupd
    created — so a deposed leader's write, or a key changed behind its back, fails whole."""
    keys = [*sorted(change.put), *change.delete]
    bodies = []
    for start in range(0, len(keys), MAX_TXN_KEYS):
        chunk = keys[start : start + MAX_TXN_KEYS]
        compares = [compare_mod(prefix + k, revisions.get(k, 0)) for k in chunk]
        if fence is not None:
            compares.append(compare_create(fence[0], fence[1]))
        ops = [
            put_op(prefix + k, change.put[k]) if k in change.put else delete_op(prefix + k)
            for k in chunk
        ]
        bodies.append({"compare": compares, "success": ops})
    return bodies


# ---------------------------------------------------------------------- lookupds


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A lookupd as youzan's ``/listlookup`` lists it (``NsqLookupdNodeInfo``)."""

    id: str
    ip: str
    tcp_port: int
    http_port: int
    epoch: int = 0

    def to_json(self) -> bytes:
        """The value kept in etcd."""
        document = {
            "ID": self.id,
            "NodeIP": self.ip,
            "TcpPort": str(self.tcp_port),
            "HttpPort": str(self.http_port),
            "RpcPort": "",
            "Epoch": self.epoch,
        }
        return json.dumps(document).encode()

    def listed(self) -> dict[str, object]:
        """The JSON object of ``/listlookup``."""
        return dict(json.loads(self.to_json()))

    @property
    def http_address(self) -> str:
        """``ip:http_port``."""
        return f"{self.ip}:{self.http_port}"


def parse_node(value: bytes) -> NodeInfo:
    """Read :meth:`NodeInfo.to_json`. Raises :class:`EtcdReplyError`."""
    try:
        document = json.loads(value)
        return NodeInfo(
            str(document["ID"]),
            str(document["NodeIP"]),
            int(document["TcpPort"]),
            int(document["HttpPort"]),
            int(document.get("Epoch", 0)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise EtcdReplyError(f"lookupd entry: {exc}") from exc


def node_id(ip: str, tcp_port: int, http_port: int) -> str:
    """A lookupd's id (youzan's shape: ``ip:http_port:tcp_port``)."""
    return f"{ip}:{http_port}:{tcp_port}"
