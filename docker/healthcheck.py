"""The image's HEALTHCHECK: GET ``/ping`` of the daemon the container runs.

The container's PID 1 is ``nsqd`` or ``nsqlookupd`` (the image's default command, or the one
``docker run`` / compose gives); its command line, read from ``/proc/1/cmdline``, is parsed with
that daemon's own flag parser, so the check asks the HTTP address it really listens on (nsqd's
default 4151, nsqlookupd's 4161). Exit 0 when it answers ``OK``, 1 otherwise (with the reason).
"""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

DAEMONS = ("nsqd", "nsqlookupd")


def ping_url(argv: Sequence[str]) -> str:
    """``http://host:port/ping`` of the daemon started with ``argv`` (``nsqd ...``,
    ``nsqlookupd ...``, or either through ``python -m nsqd`` / ``python -m lookupd``)."""
    names = [Path(arg).name for arg in argv]
    if "nsqlookupd" in names or "lookupd" in names:
        from lookupd.config.options import parse_lookupd_args

        start = names.index("nsqlookupd" if "nsqlookupd" in names else "lookupd")
        host, port = parse_lookupd_args(list(argv[start + 1 :])).http_host_port()
    elif "nsqd" in names:
        from nsqd.config.flags import parse_nsqd_args

        host, port = parse_nsqd_args(list(argv[names.index("nsqd") + 1 :])).http_host_port()
    else:
        raise ValueError(f"PID 1 is neither nsqd nor nsqlookupd: {' '.join(argv)}")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/ping"


def check(argv: Sequence[str], timeout: float = 3.0) -> str | None:
    """None when healthy, else why not."""
    try:
        url = ping_url(argv)
        with urllib.request.urlopen(url, timeout=timeout) as reply:  # noqa: S310 - http only
            body = reply.read()
    except (OSError, ValueError) as exc:
        return str(exc)
    return None if body == b"OK" else f"{url}: {body[:80]!r}"


def main() -> int:
    argv = [a.decode() for a in Path("/proc/1/cmdline").read_bytes().split(b"\0") if a]
    problem = check(argv)
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
