"""A Prometheus HTTP API client for the fleet view: ``query_range`` only (it never scrapes the
servers), with one bound on each request and every failure as one line naming the URL."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from hostgap.errors import HostgapError

Matrix = list[dict]
"""Prometheus' ``matrix`` result: ``[{"metric": {label: value}, "values": [[t, "v"], ...]}]``."""
Fetch = Callable[[str, float, float, float], Matrix]
"""``(query, start, end, step) -> matrix``: what the fleet view reads (a :class:`Prometheus` or a
recorded stand-in)."""

MAX_POINTS = 11_000
"""Prometheus refuses a query_range of more points per series than this."""
SELECTOR = re.compile(r'^\{\s*([A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*,?\s*)*\}$')


def check_selector(match: str | None) -> str:
    """``--match``: a label-matcher set such as ``{job="vllm"}``; the text inside the braces, or ""."""
    if not match:
        return ""
    text = match.strip()
    if not SELECTOR.match(text):
        raise HostgapError("--match", f'{match!r}: give label matchers in braces, e.g. {{job="vllm"}}')
    return text[1:-1].strip().rstrip(",")


@dataclass(frozen=True)
class Prometheus:
    """The HTTP API of a Prometheus server at ``url`` (``http://host:9090``)."""

    url: str
    timeout_s: float = 30.0

    def query_range(self, query: str, start: float, end: float, step: float) -> Matrix:
        if (end - start) / step + 1 > MAX_POINTS:
            raise HostgapError(
                "--interval",
                f"{(end - start) / step + 1:.0f} points per series: Prometheus answers at most {MAX_POINTS}",
            )
        args = urllib.parse.urlencode(
            {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        )
        url = f"{self.url.rstrip('/')}/api/v1/query_range"
        req = urllib.request.Request(url, data=args.encode(), method="POST")
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - the user's URL
                body = resp.read()
        except urllib.error.HTTPError as exc:
            raise HostgapError(self.url, f"query_range answered {exc.code}: {_error_of(exc.read())}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise HostgapError(self.url, f"cannot reach the Prometheus HTTP API ({reason})") from None
        return _matrix(body, self.url)


def _error_of(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error") or body[:200].decode(errors="replace"))
    except ValueError:
        return body[:200].decode(errors="replace")


def _matrix(body: bytes, source: str) -> Matrix:
    try:
        doc = json.loads(body)
    except ValueError:
        raise HostgapError(source, "query_range did not answer JSON (is this the Prometheus URL?)") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise HostgapError(source, f"query_range failed: {doc.get('error') if isinstance(doc, dict) else doc!r}")
    data = doc.get("data") or {}
    if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise HostgapError(source, "query_range answered no matrix")
    return data["result"]
