"""``transformers serve`` recognised by attach and watch, against a stand-in that answers as the
real server does (routes and bodies recorded from transformers 5.24's server on CPU; 5.17 has
the same routes less ``/v1/systemone``). The real server needs fastapi, uvicorn and openai,
which the test environment does not carry (docs/attach.md)."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.server.attach import detect
from hostgap.server.attach.client import AttachError

ROUTES_524 = {
    "/v1/chat/completions": ["post"],
    "/v1/completions": ["post"],
    "/v1/responses": ["post"],
    "/v1/systemone": ["post"],
    "/v1/audio/transcriptions": ["post"],
    "/load_model": ["post"],
    "/reset": ["post"],
    "/v1/models": ["get", "options"],
    "/health": ["get"],
}
ROUTES_517 = {k: v for k, v in ROUTES_524.items() if k != "/v1/systemone"}
MODEL = "/models/tiny-llama"


def _openapi(routes: dict) -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "FastAPI", "version": "0.1.0"},
        "paths": {p: {m: {"summary": p} for m in ms} for p, ms in routes.items()},
    }


@contextmanager
def server(routes: dict | None, openapi_body: bytes | None = None):
    """A 127.0.0.1 server answering as ``transformers serve`` with ``routes`` in its OpenAPI
    document (None: no /openapi.json, as a server that is neither)."""
    answers = {
        "/health": (200, {"status": "ok"}),
        "/v1/models": (
            200,
            {
                "object": "list",
                "data": [
                    {"owned_by": "local", "id": MODEL, "object": "model", "created": 0, "status": {"value": "loaded"}}
                ],
            },
        ),  # fmt: skip
    }
    if routes is not None:
        answers["/openapi.json"] = (200, _openapi(routes))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            return None

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.send_header("x-request-id", "5f0c6d1e-0000-4000-8000-000000000000")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/openapi.json" and openapi_body is not None:
                return self._send(200, openapi_body)
            status, doc = answers.get(self.path, (404, {"detail": "Not Found"}))
            self._send(status, json.dumps(doc).encode())

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/v1/completions":
                doc = {"id": "x", "object": "text_completion", "model": MODEL, "created": 0,
                       "choices": [{"finish_reason": "length", "index": 0, "text": "w882 w361"}],
                       "usage": {"completion_tokens": 2, "prompt_tokens": 4, "total_tokens": 6}}  # fmt: skip
                return self._send(200, json.dumps(doc).encode())
            self._send(404, b'{"detail":"Not Found"}')

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.server_version = "uvicorn"
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("routes", [ROUTES_524, ROUTES_517], ids=["5.24", "5.17"])
def test_attach_recognises_it(routes):
    with server(routes) as url:
        assert detect.is_transformers_serve(url, 5)
        with pytest.raises(AttachError) as e:
            detect.client_for(url, 5)
    assert e.value.problem == detect.TRANSFORMERS_SERVE and e.value.exit_status == 2


def test_attach_and_watch_say_the_same_line(tmp_path):
    db = str(tmp_path / "runs.sqlite")
    with server(ROUTES_524) as url:
        att = CliRunner().invoke(cli, ["attach", url, "--steps", "4", "--db", db])
        wat = CliRunner().invoke(cli, ["watch", url, "--interval", "1", "--duration", "1", "--no-store"])
    for r in (att, wat):
        assert r.exit_code == 2, r.output
        assert detect.TRANSFORMERS_SERVE in " ".join(r.output.split())
    assert len(detect.TRANSFORMERS_SERVE.splitlines()) == 1


def test_other_servers_keep_their_messages():
    partial = {k: v for k, v in ROUTES_524.items() if k != "/reset"}
    for routes, body in ((None, None), (partial, None), (ROUTES_524, b"not json"), (ROUTES_524, b'{"paths": []}')):
        with server(routes, body) as url:
            assert not detect.is_transformers_serve(url, 5)
            with pytest.raises(AttachError, match="neither vLLM"):
                detect.client_for(url, 5)
            r = CliRunner().invoke(cli, ["watch", url, "--interval", "1", "--duration", "1", "--no-store"])
            assert r.exit_code == 2 and "404 Not Found: no metrics endpoint" in r.output
    assert not detect.is_transformers_serve("http://127.0.0.1:9", 1)  # nothing listens: no answer
