"""Listen addresses as nsqd reads them: Go's ``net.SplitHostPort`` and nsqd's unix-socket rule.

An address that splits as ``host:port`` (``0.0.0.0:4150``, ``[::1]:4150``, ``:4150``) is TCP;
anything else is a unix socket path. Errors carry Go's texts.
"""

from __future__ import annotations

from typing import Literal

from pnsq._goflag.syntax import go_quote


def split_host_port(address: str) -> tuple[str, str]:
    """Split ``host:port`` like Go's ``net.SplitHostPort`` (``[::1]:4150`` → ``("::1", "4150")``);
    raises ``ValueError`` with Go's text."""

    def fail(why: str) -> ValueError:
        return ValueError(f"address {address}: {why}")

    colon = address.rfind(":")
    if colon < 0:
        raise fail("missing port in address")
    start, end = 0, 0
    if address.startswith("["):
        close = address.find("]")
        if close < 0:
            raise fail("missing ']' in address")
        if close + 1 == len(address):
            raise fail("missing port in address")
        if close + 1 != colon:
            raise fail(
                "too many colons in address"
                if address[close + 1] == ":"
                else "missing port in address"
            )
        host, start, end = address[1:close], 1, close + 1
    else:
        host = address[:colon]
        if ":" in host:
            raise fail("too many colons in address")
    if "[" in address[start:]:
        raise fail("unexpected '[' in address")
    if "]" in address[end:]:
        raise fail("unexpected ']' in address")
    return host, address[colon + 1 :]


def address_kind(address: str) -> Literal["tcp", "unix"]:
    """nsqd 1.3.0's rule: an address that does not split as ``host:port`` is a unix socket path."""
    try:
        split_host_port(address)
    except ValueError:
        return "unix"
    return "tcp"


def parse_host_port(address: str) -> tuple[str, int]:
    """``host:port`` → ``(host, port)``; an empty host means all interfaces. Raises
    ``ValueError`` for a unix socket path or a port that is not a number in [0, 65535]."""
    host, port = split_host_port(address)
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"address {address}: invalid port {go_quote(port)}")
    return host, int(port)
