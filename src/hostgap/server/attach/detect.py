"""Which engine answers at a URL, its version, and the client that speaks its protocol.

SGLang answers ``GET /get_server_info`` (newer: ``/server_info``) with its server arguments
and ``version``; vLLM answers ``GET /version`` with ``{"version": ...}`` (and ``/server_info``
only in its development mode, with the configuration as text). The first that fits decides;
the client is chosen once from that version (:mod:`hostgap.server.attach.vllm_routes`,
:mod:`hostgap.server.attach.sglang_routes`).
"""

from __future__ import annotations

from hostgap.server.attach.client import AttachError, ProfileClient
from hostgap.server.attach.sglang_routes import SglangClient
from hostgap.server.attach.vllm_routes import client_for_version
from hostgap.server.httpcall import check_url, get_json

SGLANG_KEYS = ("tp_size", "model_path", "disable_radix_cache", "chunked_prefill_size")
"""Keys only SGLang's server-info answer has."""


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
    raise AttachError(url, "answers HTTP but is neither vLLM (GET /version) nor SGLang (GET /get_server_info)")


def _vllm_info(url: str, timeout_s: float) -> dict:
    """vLLM's ``/server_info`` where its development mode serves it (else empty)."""
    status, doc = get_json(url + "/server_info", timeout_s)
    return doc if status == 200 and isinstance(doc, dict) else {}
