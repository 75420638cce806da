"""The auth server's reply as nsqd decodes and checks it, and nsqd's permission rules."""

from __future__ import annotations

import json

import pytest

from nsqd.auth import AuthError, parse_auth_reply


def reply(**fields: object) -> bytes:
    return json.dumps({"ttl": 60, **fields}).encode()


def test_reply_fields_and_expiry() -> None:
    state = parse_auth_reply(
        reply(
            identity="me",
            identity_url="http://x/me",
            authorizations=[{"topic": "t", "channels": ["c"], "permissions": ["subscribe"]}],
        ),
        now=100.0,
    )
    assert (state.identity, state.identity_url, state.expires) == ("me", "http://x/me", 160.0)
    assert len(state.authorizations) == 1


def test_keys_match_case_insensitively_and_null_is_absent() -> None:
    body = b'{"TTL": 5, "Identity": null, "AUTHORIZATIONS": [null, {"Topic": ".*"}]}'
    state = parse_auth_reply(body, now=0.0)
    assert state.expires == 5.0
    assert state.identity == ""
    assert len(state.authorizations) == 2
    assert not state.allows("t", "")  # no permissions, no channels


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"nope", "invalid JSON", id="not-json"),
        pytest.param(b"[]", "cannot unmarshal", id="not-an-object"),
        pytest.param(reply(ttl=0), "invalid TTL 0 (must be >0)", id="ttl-0"),
        pytest.param(json.dumps({"authorizations": []}).encode(), "invalid TTL 0", id="no-ttl"),
        pytest.param(reply(ttl=1.5), "cannot unmarshal ttl", id="float-ttl"),
        pytest.param(reply(identity=5), "cannot unmarshal identity", id="identity-type"),
        pytest.param(reply(authorizations={}), "cannot unmarshal", id="authorizations-type"),
        pytest.param(
            reply(authorizations=[{"permissions": ["subscribe", "admin"]}]),
            "unknown permission admin",
            id="unknown-permission",
        ),
        pytest.param(
            reply(authorizations=[{"topic": "("}]), 'unable to compile topic "("', id="topic-re"
        ),
        pytest.param(
            reply(authorizations=[{"topic": "t", "channels": ["[z-a]"]}]),
            'unable to compile channel "[z-a]"',
            id="channel-re",
        ),
        pytest.param(
            reply(authorizations=[{"channels": [1]}]), "cannot unmarshal channels", id="ch-type"
        ),
    ],
)
def test_rejected_replies(body: bytes, message: str) -> None:
    with pytest.raises(AuthError) as caught:
        parse_auth_reply(body, now=0.0)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("topic", "channel", "allowed"),
    [
        ("orders", "billing", True),
        ("my-orders-2", "billing-x", True),  # unanchored, like Go's MatchString
        ("orders", "other", False),
        ("order", "billing", False),
        ("orders", "", True),  # publish: some channel regex must match ""
        ("events", "", False),  # subscribe-only authorization
        ("events", "any", True),
    ],
)
def test_permission_rules(topic: str, channel: str, allowed: bool) -> None:
    state = parse_auth_reply(
        reply(
            authorizations=[
                {
                    "topic": "orders",
                    "channels": ["billing", "^$"],
                    "permissions": ["subscribe", "publish"],
                },
                {"topic": "^events$", "channels": [".*"], "permissions": ["subscribe"]},
            ]
        ),
        now=0.0,
    )
    assert state.allows(topic, channel) is allowed
