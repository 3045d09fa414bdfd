"""Which engine answers at a URL, its version, and the client that speaks its protocol.

SGLang answers ``GET /get_server_info`` (newer: ``/server_info``) with its server arguments
and ``version``; vLLM answers ``GET /version`` with ``{"version": ...}`` (and ``/server_info``
only in its development mode, with the configuration as text). The first that fits decides;
the client is chosen once from that version (:mod:`hostgap.server.attach.vllm_routes`,
:mod:`hostgap.server.attach.sglang_routes`).

``transformers serve`` (an OpenAI API over transformers' continuous batching) is recognised too,
to say in one line why hostgap can do nothing with it (:data:`TRANSFORMERS_SERVE`): it answers
none of the above, serves no ``/metrics``, no profiler routes and no version; only its route set
(FastAPI's ``/openapi.json``) names it: ``/load_model``, ``/reset`` and ``/v1/responses``
together, which neither vLLM nor SGLang serves.
"""

from __future__ import annotations

from hostgap.errors import HostgapError
from hostgap.server.attach.client import AttachError, ProfileClient
from hostgap.server.attach.sglang_routes import SglangClient
from hostgap.server.attach.vllm_routes import client_for_version
from hostgap.server.httpcall import check_url, get_json

SGLANG_KEYS = ("tp_size", "model_path", "disable_radix_cache", "chunked_prefill_size")
"""Keys only SGLang's server-info answer has."""

TRANSFORMERS_SERVE_ROUTES = ("/load_model", "/reset", "/v1/responses")
"""Routes that, together, only ``transformers serve`` has (5.17 and 5.24)."""

TRANSFORMERS_SERVE = (
    "transformers serve (OpenAI API; no /metrics, no profiler routes, no version): hostgap cannot attach to it "
    "(nothing starts a profile) or watch it (no metrics); measure the same model's loop in process instead: "
    "hostgap measure --engine hf-cb --model DIR"
)
"""What attach and watch say about ``transformers serve`` (exit status 2)."""


def client_for(url: str, timeout_s: float = 10.0) -> ProfileClient:
    """The profile client for the server at ``url`` (AttachError, exit 2, when it is neither
    vLLM nor SGLang, or does not answer)."""
    url = check_url(url)
    for path in ("/get_server_info", "/server_info"):
        status, doc = get_json(url + path, timeout_s)
        if status == 200 and isinstance(doc, dict) and any(k in doc for k in SGLANG_KEYS):
            version = str(doc.get("version") or "unknown")
            return SglangClient(url, version, doc)
    status, doc = get_json(url + "/version", timeout_s)
    if status == 200 and isinstance(doc, dict) and doc.get("version"):
        info = _vllm_info(url, timeout_s)
        return client_for_version(url, str(doc["version"]), info)
    if is_transformers_serve(url, timeout_s):
        raise AttachError(url, TRANSFORMERS_SERVE)
    raise AttachError(url, "answers HTTP but is neither vLLM (GET /version) nor SGLang (GET /get_server_info)")


def is_transformers_serve(url: str, timeout_s: float = 10.0) -> bool:
    """Whether the server at ``url`` (``http://HOST:PORT``) is ``transformers serve``: its
    ``/openapi.json`` lists every route of :data:`TRANSFORMERS_SERVE_ROUTES`. False for any
    other answer, or none."""
    try:
        status, doc = get_json(url.rstrip("/") + "/openapi.json", timeout_s)
    except HostgapError:  # no answer
        return False
    paths = doc.get("paths") if status == 200 and isinstance(doc, dict) else None
    return isinstance(paths, dict) and all(p in paths for p in TRANSFORMERS_SERVE_ROUTES)


def _vllm_info(url: str, timeout_s: float) -> dict:
    """vLLM's ``/server_info`` where its development mode serves it (else empty)."""
    status, doc = get_json(url + "/server_info", timeout_s)
    return doc if status == 200 and isinstance(doc, dict) else {}
