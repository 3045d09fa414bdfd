"""Small HTTP helpers over the standard library, with a timeout on every call.

:func:`call` returns ``(status, body)`` for any HTTP answer (4xx and 5xx included) and raises
:class:`Unreachable` when no answer came (refused, reset, timed out, bad host): the caller
decides what a status means for its protocol.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from hostgap.errors import HostgapError

DEFAULT_TIMEOUT_S = 10.0


class Unreachable(HostgapError):
    """No HTTP answer from the server (connection refused or reset, timeout, DNS)."""

    exit_status = 2


def check_url(url: str) -> str:
    """``url`` without a trailing slash; HostgapError (exit 2) unless it is http(s)://host[:port]."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise HostgapError(url, f"not a valid server URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HostgapError(url, "not a server URL: give http://HOST:PORT (e.g. http://127.0.0.1:8000)")
    if port == 0:
        raise HostgapError(url, "port 0 is not a server port")
    if parts.query or parts.fragment:
        raise HostgapError(url, "a server URL has no query or fragment: give http://HOST:PORT")
    return url.rstrip("/")


def call(
    method: str,
    url: str,
    body: dict | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """One request; ``(status, body bytes)``. Raises :class:`Unreachable` without an answer."""
    data = json.dumps(body).encode() if body is not None else None
    hdrs = {"Content-Type": "application/json"} if data is not None else {}
    hdrs.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        try:
            text = e.read()
        except (TimeoutError, OSError):
            text = b""
        return int(e.code), text
    except (TimeoutError, urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise Unreachable(
            url, f"no answer from the server ({reason or type(e).__name__}) within {timeout_s:g} s"
        ) from None


def get_json(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[int, Any]:
    """``(status, parsed JSON or None)`` of a GET."""
    status, body = call("GET", url, timeout_s=timeout_s)
    return status, parse_json(body)


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return None


def message(body: bytes, limit: int = 200) -> str:
    """A server's error text, short: the JSON ``message``/``detail``/``error`` when there is one."""
    doc = parse_json(body)
    if isinstance(doc, dict):
        for k in ("message", "detail", "error"):
            v = doc.get(k)
            if isinstance(v, dict):
                v = v.get("message") or v
            if v:
                return str(v)[:limit]
    return body.decode("utf-8", "replace").strip()[:limit]
