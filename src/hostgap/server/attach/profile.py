"""``hostgap attach URL``: profile a running vLLM or SGLang server for N steps and analyse them.

Order of work (docs/attach.md):

1. detect the engine and its version (:func:`hostgap.server.attach.detect.client_for`);
2. find the trace directory: ``--trace-dir``, else the one in the request (SGLang
   ``output_dir``: the run directory), else the server's configuration (vLLM ``/server_info``,
   or the command line of the local process that listens on the port);
3. with ``--load C``, start C streaming requests and wait until all decode;
4. start the profile (:meth:`ProfileClient.start`), wait for the steps, and in a ``finally``
   send the stop request owed (:meth:`ProfileClient.stop`): on success, error, Ctrl-C or
   SIGTERM alike; then stop the load;
5. wait until every file is complete, copy them into the run directory, and analyse them with
   the functions of ``hostgap analyze`` (:mod:`hostgap.server.attach.steps_seen`);
6. store the run (results.json, runs database) like a measured one.

Exit statuses: 0 a result; 2 bad input or a server that cannot be profiled as asked (nothing was
started on it); 3 profiling started but no usable result came back (server died or hung, no
steps seen, files not visible here). Every fault ends within ~30 s with the stop sent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from hostgap.server.attach.client import (
    CANCELLED,
    EXIT_NO_RESULT,
    NOT_VISIBLE,
    AttachError,
    ProfileClient,
    ProfileRequest,
)
from hostgap.server.attach.config import AttachConfig, Session, config_dict
from hostgap.server.attach.loadgen import LoadGenerator, late_streams
from hostgap.server.attach.overhead import Overhead, pause
from hostgap.server.attach.step_counter import PROGRESS_EVERY_S, Bar, LoadCounter, MetricsCounter
from hostgap.server.attach.tracefiles import Found, listing, new_files, visible, wait_complete
from hostgap.server.httpcall import Unreachable, call, check_url

FILES_APPEAR_S = 30.0
"""After the stop, the longest wait for the first engine (worker) file of the profile to appear:
vLLM's stop returns once its files are written and SGLang stopped by itself, so none by then
means none will come (a wrong --trace-dir, a server-side failure). The API server's own file does
not count: vLLM writes it at every stop, also when the engine ran no step."""
IDLE_APPEAR_S = 2.0
"""The same wait when the step counter saw no step during the profile: the engine recorded
nothing (vLLM's Worker starts its profiler at its first step), so no file is coming."""
SETTLE_S = 1.0
"""Pause between the stop and the after-window of the metrics: the stall of the stop itself (the
Worker writing its trace) shows in the inter-token latency of the tokens it held up."""
START_MARGIN_STEPS = 32
"""Steps allowed between the decision to start and the engine's first recorded one (the start
request's round trip: vLLM asks the Worker before it starts its own profiler; SGLang starts on
the next step)."""
FAULT_STOP_TIMEOUT_S = 10.0
"""Timeout of the stop request on a fault path (dead, hung server; Ctrl-C): the whole exit stays
within 30 s."""
HEALTH_TIMEOUT_S = 3.0
HEALTH_FAILURES = 2
"""Consecutive unanswered health checks (each ``HEALTH_TIMEOUT_S``) that mean the server died or hung."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwind like Ctrl-C (exit 130), sending the stop owed."""


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While attached, SIGTERM raises :class:`Terminated` in the main thread (so ``finally``
    blocks run) instead of killing the process with a profile left running."""

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-attach-" + uuid.uuid4().hex[:6]


def alive(url: str) -> bool:
    try:
        status, _ = call("GET", url + "/health", timeout_s=HEALTH_TIMEOUT_S)
    except Unreachable:
        return False
    return status < 500


class Watch:
    """Health of the server while attach waits: raises after ``HEALTH_FAILURES`` misses."""

    def __init__(self, url: str, every_s: float = 1.0):
        self.url = url
        self.every_s = every_s
        self.misses = 0
        self.last = 0.0

    def check(self) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return
        self.last = now
        if alive(self.url):
            self.misses = 0
            return
        self.misses += 1
        if self.misses >= HEALTH_FAILURES:
            raise AttachError(
                self.url,
                f"the server stopped answering mid-profile ({self.misses} health checks "
                f"unanswered in {HEALTH_TIMEOUT_S:g} s each)",
                EXIT_NO_RESULT,
            )


# -- the trace directory ----------------------------------------------------------------------


def choose_trace_dir(cfg: AttachConfig, client: ProfileClient, run_dir: Path) -> tuple[str | None, str]:
    """(directory, where it came from)."""
    if cfg.trace_dir:
        return os.path.abspath(cfg.trace_dir), "--trace-dir"
    if client.engine == "sglang":
        return str(run_dir.resolve() / "server-traces"), "the request (output_dir)"
    reported = client.server_trace_dir()
    if reported:
        return reported, "the server's configuration (/server_info)"
    from hostgap.server.attach.local import local_trace_dir

    local = local_trace_dir(client.url)
    if local:
        return local, "the server process's command line"
    return None, "unknown"


# -- waiting ----------------------------------------------------------------------------------


def wait_steps(
    counter: Callable[[], int | None],
    target: int,
    deadline: float,
    idle_s: float,
    watch: Watch,
    bar: Bar,
    done: Callable[[], bool] | None = None,
    cancel: threading.Event | None = None,
) -> int | None:
    """Wait until ``counter()`` advanced by ``target`` steps (or ``done()``), the deadline, or
    ``idle_s`` without a counted step. Returns the steps counted (None when nothing counts).

    The idle clock runs from the last step counted: a read that fails (``None``, a busy
    server's slow /metrics) neither counts as a step nor restarts it. ``cancel`` set ends the
    wait with :class:`AttachError` (``CANCELLED``)."""
    base = counter()
    last_change, last = time.monotonic(), base
    while time.monotonic() < deadline:
        if cancel is not None and cancel.is_set():
            raise AttachError(watch.url, "cancelled while waiting for steps", EXIT_NO_RESULT, reason=CANCELLED)
        watch.check()
        now_count = counter()
        if base is None:
            base = last = now_count
        seen = None if base is None or now_count is None else now_count - base
        bar.show(
            seen, f"(no step for {time.monotonic() - last_change:.0f} s of --idle {idle_s:g})" if seen == 0 else ""
        )
        if done is not None and done():
            return seen
        if seen is not None and seen >= target:
            return seen
        if now_count is not None and now_count != last:
            last, last_change = now_count, time.monotonic()
        elif last is not None and time.monotonic() - last_change > idle_s:
            return seen
        time.sleep(0.2)
    return None if base is None else (counter() or base) - base


def wait_or_cancel(session: Session, seconds: float) -> None:
    """Wait ``seconds`` (a baseline window); AttachError ``CANCELLED`` when the caller's cancel
    event is set (at once, or during the wait)."""
    if session.cancel is None:
        pause(seconds)
    elif session.cancel.wait(seconds) or session.cancel.is_set():
        url = session.client.url if session.client is not None else ""
        raise AttachError(url, "cancelled", EXIT_NO_RESULT, reason=CANCELLED)


def files_progress(session: Session, say: Callable[[str], None], files_s: float) -> Callable[[], None]:
    """The file wait's tick: ends it when cancelled, says it every PROGRESS_EVERY_S seconds."""
    t0 = time.monotonic()
    said = [t0]

    def tick() -> None:
        wait_or_cancel(session, 0.0)
        now = time.monotonic()
        if now - said[0] >= PROGRESS_EVERY_S:
            said[0] = now
            say(f"waiting for the engine's complete trace file: {now - t0:.0f} s of at most {files_s:.0f} s")

    return tick


def step_counter(url: str, load: LoadGenerator | None) -> Callable[[], int | None]:
    if load is not None:
        return LoadCounter(load).count
    return MetricsCounter(url).count


# -- one attach -------------------------------------------------------------------------------


def attach(
    cfg: AttachConfig, say: Callable[[str], None] = lambda m: None, cancel: threading.Event | None = None
) -> dict:
    """Profile the server of ``cfg`` and return the result (also stored, with ``cfg.store``).
    Raises :class:`AttachError` with the documented exit status. ``cancel`` (a caller's event,
    e.g. a watch that ends) ends the wait early: the stop owed is sent, AttachError ``CANCELLED``."""
    from hostgap.server.attach.detect import client_for
    from hostgap.store.rundir import RunDir

    url = check_url(cfg.url)
    client = client_for(url)
    say(f"{client.engine} {client.version} at {url} ({client.protocol})")
    session = Session(new_run_id(), client, cancel=cancel)
    run_dir = RunDir.create(Path(cfg.output) / session.run_id)
    ok = False
    try:
        session.trace_dir, session.trace_dir_source = choose_trace_dir(cfg, client, run_dir.path)
        if client.engine == "sglang" and session.trace_dir:
            os.makedirs(session.trace_dir, exist_ok=True)
        with sigterm_unwinds():
            profile(cfg, client, session, say)
        result = finish(cfg, client, session, run_dir, say)
        ok = True
        return result
    finally:
        if not ok and not (run_dir.path / "results.json").exists():
            keep_or_remove(run_dir, say)


def keep_or_remove(run_dir, say: Callable[[str], None]) -> None:
    """After a failed attach: keep the run directory when the server wrote trace files into it
    (SGLang's ``output_dir``; its incomplete mark is dropped so no later run removes it as
    stale), else remove it."""
    from hostgap.store.rundir import INCOMPLETE

    written = [p for p in run_dir.path.rglob("*.json*") if p.is_file() and p.name != INCOMPLETE]
    if written:
        (run_dir.path / INCOMPLETE).unlink(missing_ok=True)
        say(f"kept the {len(written)} trace file(s) the server wrote in {run_dir.path}")
    else:
        run_dir.remove_if_incomplete()


def profile(cfg: AttachConfig, client: ProfileClient, session: Session, say: Callable[[str], None]) -> None:
    """Load (optional), start, wait, stop: the stop owed is sent on every path."""
    folder = Path(session.trace_dir) if session.trace_dir and visible(session.trace_dir) else None
    before = listing(folder) if folder is not None else set()
    session.before = before
    prefix = f"hostgap-{session.run_id}"
    load = LoadGenerator(client.url, cfg.load) if cfg.load is not None else None
    watch = Watch(client.url)
    cost = Overhead(client.url)
    faulted = True
    try:
        if load is not None:
            load.start()
            spec = load.spec
            say(
                f"load: {spec.concurrency} streaming requests, prompt {spec.prompt_len}, "
                f"output {spec.output_len} tokens"
            )
            if not load.wait_streaming(min(cfg.wait_s, 300.0)):
                raise AttachError(
                    client.url,
                    "the load did not reach decode: " + (load.stats.first_error or "no token streamed in time"),
                )
        counter = step_counter(client.url, load)
        if cfg.baseline_s:
            cost.mark("before0")
            wait_or_cancel(session, cfg.baseline_s)
            cost.mark("before1")
        if load is not None:
            make_room(client.url, load, cfg.skip + cfg.steps + 1 + START_MARGIN_STEPS, cfg.wait_s, session, say)
        if cfg.skip and not client.counts_steps or (cfg.skip and client.self_stopping):
            wait_steps(
                counter,
                cfg.skip,
                time.monotonic() + cfg.wait_s,
                cfg.idle_s,
                watch,
                Bar(cfg.skip, "skipping", say=say),
                cancel=session.cancel,
            )
        wait_or_cancel(session, 0.0)
        req = ProfileRequest(
            steps=cfg.steps,
            skip=cfg.skip if client.counts_steps and not client.self_stopping else 0,
            prefix=prefix,
            output_dir=session.trace_dir,
        )
        client.start(req)
        session.started_at = time.time()
        session.steps_counted = wait_for_profile(cfg, client, session, folder, before, prefix, counter, watch, req, say)
        faulted = False
    finally:
        if client.started:
            if faulted:
                client.stop_timeout_s = FAULT_STOP_TIMEOUT_S
            session.stop_problem = client.stop()
            session.stopped_at = time.time()
        if cfg.baseline_s and not faulted:
            pause(SETTLE_S)  # tokens held up by the stop (the trace being written) land before the window
            cost.mark("after0")
            pause(cfg.baseline_s)
            cost.mark("after1")
            session.overhead = cost
        if load is not None:
            load.stop()
            session.notes.append(f"load: {load.stats.finished} requests finished, {load.stats.errors} errors")
            session.load_stats = load.stats.to_dict()
            if late_streams(session.load_stats):
                session.notes.append(
                    f"load: {load.stats.late} of the {load.stats.timed} requests that finished streamed all "
                    "their tokens at once at their end: the server's API process ran behind its engine, "
                    "so the load's batch could not be followed from here"
                )
    if session.stop_problem:
        say(f"note: {session.stop_problem}")


def make_room(url: str, load: LoadGenerator, need: int, wait_s: float, session: Session, say) -> None:
    """Before the start: every load request must have ``need`` tokens (steps) left, so that none
    ends inside the window (the batch would shrink, then hold its replacement's prefill).
    Requests that started together end together, often about when the profile starts (after the
    baseline): when the first of them to end has less than ``need`` or less than half its length
    left (slack for a start that is slow to reach the engine), every request is restarted
    together and the profile starts once all stream again. Requests shorter than ``need`` cannot
    cover the window: said, not fixed."""
    out = load.spec.output_len
    if out < need:
        note = (
            f"--output-len {out} is shorter than the window ({need} steps: --skip, --steps and "
            f"{START_MARGIN_STEPS} for the start): the load's requests end inside it; give --output-len {need} or more"
        )
        session.notes.append(note)
        say(f"note: {note}")
        return
    room = load.room()
    if room >= max(need, out // 2):
        return
    if not load.refresh(min(wait_s, 300.0)):
        raise AttachError(
            url, "the restarted load did not reach decode: " + (load.stats.first_error or "no token streamed in time")
        )
    session.notes.append(
        f"load: the {load.spec.concurrency} requests were restarted together before the start "
        f"(the first to end had {room} of its {out} tokens left)"
    )


def wait_for_profile(
    cfg: AttachConfig,
    client: ProfileClient,
    session: Session,
    folder: Path | None,
    before: set[str],
    prefix: str,
    counter: Callable[[], int | None],
    watch: Watch,
    req: ProfileRequest,
    say: Callable[[str], None] = lambda m: None,
) -> int | None:
    """Wait until the engine recorded the steps: its worker files appear (bounded and
    self-stopping protocols, directory visible) or the counter says so."""
    target = req.skip + req.steps + 1  # the engine stops on the step after the last recorded one
    name_prefix = prefix if client.names_with_prefix else None
    bar = Bar(target, "profiling", say=say)
    deadline = time.monotonic() + cfg.wait_s
    try:
        if folder is not None and (client.counts_steps or client.self_stopping):

            def files_done() -> bool:
                return bool(new_files(folder, before, client.worker_file, client.frontend_file, name_prefix).workers)

            # a bounded engine is done a few steps after the target: far beyond it without a file,
            # the files go elsewhere (a wrong --trace-dir) and waiting on is pointless. Counted from
            # the load's streamed tokens, "beyond" allows one request more: a server that streams
            # late (loadgen) delivers a request's tokens at once when it has ended, steps it ran
            # before the start, counted after it.
            far = 4 * target + 50 + (cfg.load.output_len if cfg.load is not None else 0)
            return wait_steps(counter, far, deadline, cfg.idle_s, watch, bar, done=files_done, cancel=session.cancel)
        return wait_steps(counter, target, deadline, cfg.idle_s, watch, bar, cancel=session.cancel)
    finally:
        bar.close()


# -- after the stop ---------------------------------------------------------------------------


def finish(cfg: AttachConfig, client: ProfileClient, session: Session, run_dir, say: Callable[[str], None]) -> dict:
    from hostgap.server.attach.record import build_result, store

    folder = Path(session.trace_dir) if session.trace_dir and visible(session.trace_dir) else None
    prefix = f"hostgap-{session.run_id}"
    if folder is None:
        where = session.trace_dir or "the server's profiler directory (torch_profiler_dir)"
        raise AttachError(
            client.url,
            f"profiled, but the files are not visible here: they are in {where} on the "
            f"server, named {prefix}*; copy them here and run: hostgap analyze DIR/",
            EXIT_NO_RESULT,
            reason=NOT_VISIBLE,
        )
    # the API server writes its file when the stop reaches it: a stop without an answer may never have
    want_frontend = client.frontend_file is not None and client.engine == "vllm" and not session.stop_problem
    found = wait_complete(
        folder,
        session.before,
        client.worker_file,
        client.frontend_file,
        prefix if client.names_with_prefix else None,
        time.monotonic() + cfg.files_s,
        min_workers=client.world_size() or 1,
        want_frontend=want_frontend,
        appear_s=IDLE_APPEAR_S if session.steps_counted == 0 else FILES_APPEAR_S,
        tick=files_progress(session, say, cfg.files_s),
    )
    if not found.workers:
        why = no_trace_reason(
            folder,
            session.before,
            client,
            prefix if client.names_with_prefix else None,
            session.steps_counted,
            cfg.files_s,
        )
        raise AttachError(client.url, why, EXIT_NO_RESULT)
    kept = Found([copy_in(p, run_dir.path) for p in found.workers], [copy_in(p, run_dir.path) for p in found.frontend])
    session.files = kept
    say(f"traces: {', '.join(p.name for p in kept.all)}")
    run_dir.write_json("config.json", config_dict(cfg))
    result = build_result(cfg, client, session, run_dir)
    if cfg.store:
        store(result, run_dir, cfg.db)
    return result


def no_trace_reason(
    folder: Path, before: set[str], client: ProfileClient, prefix: str | None, steps_counted: int | None, files_s: float
) -> str:
    """Why no complete engine trace of this profile (vLLM's Worker, SGLang's scheduler) is there,
    from what the folder holds now: no step ran; the engine's file came but never completed; only
    the API server's came; files came under another name; or nothing came."""
    if steps_counted == 0:
        return "the server ran no steps while profiled (no traffic): give --load C to drive it"
    mine = new_files(folder, before, client.worker_file, client.frontend_file, prefix)
    if mine.workers:
        sizes = ", ".join(f"{p.name} ({size_of(p)})" for p in mine.workers)
        return (
            f"the engine's trace of this profile appeared in {folder} but was not complete after "
            f"{files_s:.0f} s: {sizes}: the server is still writing it or failed writing it (its log says which)"
        )
    if mine.frontend:
        return (
            f"the API server's trace of this profile ({mine.frontend[0].name}) appeared in {folder} but no "
            "engine's: the engine recorded no step or failed writing its trace (the server's log says which)"
        )
    other = new_files(folder, before, client.worker_file, client.frontend_file) if prefix else Found()
    if other.all:
        return (
            f"no trace named {prefix}* appeared in {folder}, but other new traces did "
            f"({', '.join(p.name for p in other.all)}): another client's profile wrote them"
        )
    return (
        f"no trace of this profile{f' ({prefix}*)' if prefix else ''} appeared in {folder}: the server writes its "
        "traces elsewhere (check --trace-dir) or failed writing them (its log says which)"
    )


def size_of(path: Path) -> str:
    try:
        return f"{path.stat().st_size} bytes"
    except OSError:
        return "gone"


def copy_in(src: Path, run_dir: Path) -> Path:
    """Copy a server's trace into ``run_dir/traces`` (the server's own file is kept; one the
    server wrote inside the run directory is moved)."""
    dst = run_dir / "traces" / src.name
    if run_dir.resolve() in src.resolve().parents:
        shutil.move(src, dst)
    else:
        shutil.copyfile(src, dst)
    return dst
