"""Request paths as Go's nsqd and nsqlookupd take them (``net/http`` and httprouter v1.3.0).

* A request line in absolute form (``POST http://host:4151/pub HTTP/1.1``, what a client sends
  through a proxy) names the path of its URL (:func:`request_path`).
* A path no route has is redirected to the route it names once cleaned — no empty, ``.`` or
  ``..`` segments, letters in any case, with or without a trailing slash — when that route takes
  the request's method (httprouter's RedirectTrailingSlash and RedirectFixedPath): ``301`` for
  GET, ``307`` (the method and body kept) for any other, to the route's own spelling with the
  query string (:func:`fixed_path`, :func:`redirect`). ``//pub`` and ``/PUB/`` go to ``/pub``.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from urllib.parse import urlsplit

from .http import Scope, Send

__all__ = ["clean_path", "fixed_path", "redirect", "request_path"]


def request_path(scope: Scope) -> str:
    """The request's path; for an absolute-form target, its URL's (``/`` when it has none)."""
    path: str = scope["path"]
    if path.startswith(("http://", "https://")):
        return urlsplit(path).path or "/"
    return path


def clean_path(path: str) -> str:
    """httprouter's CleanPath: rooted, without empty, ``.`` and ``..`` segments (``..`` at the
    root stays at the root), a trailing slash kept."""
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    cleaned = "/" + "/".join(segments)
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def fixed_path(path: str, method: str, find: Callable[[str, str], str | None]) -> str | None:
    """Where a request for ``path``, which no route has, is redirected: the route ``find`` gives
    for the cleaned path (or for it without its trailing slash), ``find(candidate, method)``
    answering the route's own spelling of ``candidate`` matched without regard to case when that
    route takes ``method``, else None. None: no redirect (nothing found, or ``/``)."""
    if path == "/" or method == "CONNECT":
        return None
    cleaned = clean_path(path)
    found = find(cleaned, method)
    if found is None and len(cleaned) > 1 and cleaned.endswith("/"):
        found = find(cleaned[:-1], method)
    return found if found != path else None


async def redirect(send: Send, method: str, location: str) -> None:
    """Go's ``http.Redirect`` as httprouter calls it: ``301`` with a short HTML body for GET,
    ``307`` and no body for any other method (its client repeats it, body and all)."""
    status, body, headers = 307, b"", [(b"Location", location.encode())]
    if method == "GET":
        status = 301
        body = f'<a href="{html.escape(location)}">Moved Permanently</a>.\n\n'.encode()
        headers.append((b"Content-Type", b"text/html; charset=utf-8"))
    headers.append((b"Content-Length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
