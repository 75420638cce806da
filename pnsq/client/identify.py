"""The IDENTIFY a Trio :class:`~pnsq.client.connection.Connection` opens with: the JSON body it
sends and the reading of nsqd's reply.

Kept apart from the connection because it is pure (no I/O): what the client asks for and what
it refuses (nsqd offering TLS, snappy or deflate, which this client does not speak).
"""

from __future__ import annotations

import json
import socket
from typing import Any, Final

from .errors import UnexpectedResponseError

USER_AGENT: Final = "pnsq-client/0.1.0"


def identify_body(
    client_id: str,
    heartbeat_interval_ms: int,
    msg_timeout_ms: int | None,
    feature_negotiation: bool,
    identify_extra: dict[str, Any] | None,
) -> dict[str, Any]:
    """The IDENTIFY JSON object; ``identify_extra`` overrides or adds keys."""
    body: dict[str, Any] = {
        "client_id": client_id,
        "hostname": socket.gethostname(),
        "user_agent": USER_AGENT,
        "feature_negotiation": feature_negotiation,
        "heartbeat_interval": heartbeat_interval_ms,
    }
    if msg_timeout_ms is not None:
        body["msg_timeout"] = msg_timeout_ms
    body.update(identify_extra or {})
    return body


def parse_features(reply: bytes) -> dict[str, Any]:
    """nsqd's features from its IDENTIFY reply: ``{}`` for a plain ``OK`` (no negotiation).

    Raises:
        UnexpectedResponseError: the reply is not a JSON object, or it turns on a stream
            upgrade (TLS, snappy, deflate) that this client cannot follow.
    """
    if reply == b"OK":
        return {}
    try:
        features = json.loads(reply)
    except ValueError as exc:
        raise UnexpectedResponseError(f"IDENTIFY reply is not JSON: {reply!r}") from exc
    if not isinstance(features, dict):
        raise UnexpectedResponseError(f"IDENTIFY reply is not an object: {reply!r}")
    upgrades = [k for k in ("tls_v1", "snappy", "deflate") if features.get(k) is True]
    if upgrades:
        raise UnexpectedResponseError(f"nsqd negotiated {upgrades}: not supported")
    return features
