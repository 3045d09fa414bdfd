"""The fleet through its Prometheus: ``rules`` (recording rules per calibrated class) and the
fleet view (``watch(prometheus=...)``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from hostgap.api._results import Result

if TYPE_CHECKING:
    from rich.console import Console


class RulesResult(Result):
    """``hostgap rules``: the rule file (``yaml``) and the classes it covers (``to_dict()``)."""

    kind = "rules"

    def __init__(self, doc: dict, yaml_text: str):
        super().__init__(doc)
        self.yaml = yaml_text

    def write(self, path: str) -> None:
        """Write the rule file to ``path``."""
        with open(path, "w") as f:
            f.write(self.yaml)

    def _render(self, con: Console) -> None:
        con.print(self.yaml, markup=False, highlight=False, soft_wrap=True, end="")

    def _summary(self) -> str:
        return f"{len(self._doc['classes'])} class(es)"


def rules(
    calibration: str | Sequence[str] = (),
    *,
    db: str | None = None,
    window: str = "1m",
    hardware_label: str | None = None,
    sglang: bool = True,
) -> RulesResult:
    """Prometheus recording rules computing watch's host-exposed share per instance of every
    calibrated class (engine, model, hardware) from the engines' own series (docs/watch.md,
    "A fleet through Prometheus"). ``calibration``: attach runs (ids, directories, files), grouped
    by class, each class's runs fitted together; none: every attach run in the runs database."""
    from hostgap import SCHEMA_VERSION
    from hostgap.errors import HostgapError
    from hostgap.server.fleet.classes import class_calibrations
    from hostgap.server.fleet.rules import RulesConfig, rules_document, rules_yaml

    if not _is_duration(window):
        raise HostgapError(window, "not a Prometheus duration (e.g. 30s, 1m, 5m)")
    refs = [calibration] if isinstance(calibration, str) else list(calibration)
    classes = class_calibrations(refs, db)
    cfg = RulesConfig(window=window, hardware_label=hardware_label, sglang=sglang)
    doc = rules_document(classes, cfg)
    header = [
        f"Prometheus recording rules from hostgap rules (schema {SCHEMA_VERSION}); docs/watch.md.",
        f"Rate window {window}. Classes and their calibrations:",
        *(f"  {c.engine} {c.model} on {c.hardware or 'any hardware'}: {c.name}" for c in classes),
    ]
    result = {
        "schema_version": SCHEMA_VERSION,
        "kind": "rules",
        "window": window,
        "hardware_label": hardware_label,
        "classes": [c.to_dict() for c in classes],
        "rules": doc,
    }
    return RulesResult(result, rules_yaml(doc, header))


def _is_duration(text: str) -> bool:
    import re

    return bool(re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", text))


class FleetWatch(Result):
    """``hostgap watch --prometheus URL``: iterate it for one row per instance per interval (as it
    is read); then ``to_dict()`` is the ``--json`` document, ``failed`` the ``--fail-if``
    conditions that held on some instance. A context manager: leaving it stops a live view."""

    kind = "fleet_watch"

    def __init__(self, session, schema_version: int, close: Callable[[], None]):
        super().__init__(None)
        self._session = session
        self._schema = schema_version
        self._close = close

    def __iter__(self) -> Iterator[dict]:
        return iter(self._session)

    def __enter__(self) -> FleetWatch:
        return self

    def __exit__(self, *exc) -> None:
        self._session.stop()
        self._close()

    def stop(self) -> None:
        self._session.stop()

    def run(self) -> FleetWatch:
        """Read every row (a history; a live view until its duration) and close."""
        with self:
            for _ in self:
                pass
        return self

    def to_dict(self) -> dict:
        return self._session.document(self._schema)

    def to_json(self) -> str:
        from hostgap.report.terminal import dumps_json

        return dumps_json(self.to_dict())

    @property
    def failed(self) -> list[str]:
        return self.to_dict()["failed"]

    @property
    def header(self) -> str:
        """The header of :meth:`table_line`'s lines."""
        from hostgap.report.fleet_view import FLEET_HEADER

        return FLEET_HEADER

    def table_line(self, row: dict) -> str:
        from hostgap.report.fleet_view import fleet_line

        return fleet_line(row)

    def csv_rows(self) -> list[dict]:
        keep = ("instance", "job", "model", "t_end", "interval_s", "status", "steps_per_s", "seqs_per_step")
        more = ("step_period_s", "host_share", "host_share_low", "host_share_high", "host_share_basis", "calibration")
        return [{k: r.get(k) for k in (*keep, *more)} for r in self.to_dict()["intervals"]]

    def _render(self, con: Console) -> None:
        from hostgap.report.fleet_view import summary_lines

        for line in summary_lines(self.to_dict()):
            con.print(line, markup=False, highlight=False, soft_wrap=True)

    def _summary(self) -> str:
        return f"{self._session.count} rows"


def fleet_watch(
    prometheus: str,
    *,
    match: str | None = None,
    since: str | float | None = None,
    start: str | float | None = None,
    end: str | float | None = None,
    interval: float | None = None,
    duration: float | None = None,
    calibration: str | Sequence[str] = (),
    db: str | None = None,
    hardware_label: str | None = None,
    fail_if: str | None = None,
    jsonl: str | None = None,
    lag: float = 15.0,
    calibrate: bool = False,
    calibrate_steps: int = 32,
    recalibrate_after: float = 3600.0,
    trace_dir: str | None = None,
    output: str = "runs",
    store: bool = True,
    on_note: Callable[[str], None] = lambda m: None,
) -> FleetWatch:
    """The fleet view (``hostgap watch --prometheus URL``): watch's rows for every instance the
    Prometheus at ``prometheus`` holds (``match``: label matchers such as ``{job="vllm"}``), read
    through its HTTP API; over ``since`` (a duration back from now) or ``start``..``end``, or
    live from now (no end) until ``duration`` seconds. vLLM instances are read with their class's
    calibration (``calibration``: attach runs, or the attach runs in ``db``; none: rows without a
    share, saying why). ``calibrate`` (live only): renew each class's calibration when its traffic
    leaves the calibrated range, and take one for a vLLM class without any, by attaching to one of
    its instances (:mod:`hostgap.server.fleet.renew`; ``calibrate_steps``, ``recalibrate_after``,
    ``trace_dir``, ``output``, ``store`` as ``watch --calibrate``'s)."""
    from hostgap import SCHEMA_VERSION
    from hostgap.errors import HostgapError
    from hostgap.server.fleet.classes import class_calibrations
    from hostgap.server.fleet.fleet_session import FleetConfig, FleetSession, parse_duration, parse_time
    from hostgap.server.fleet.promql import Prometheus, check_selector
    from hostgap.server.watch.loop import parse_conditions

    if since is not None and start is not None:
        raise HostgapError("--since", "give --since or --start, not both")
    if end is not None and start is None:
        raise HostgapError("--end", "give --start with --end")
    now = time.time()
    t0 = parse_time(start, "--start") if start is not None else None
    t1 = parse_time(end, "--end") if end is not None else None
    if since is not None:
        t0, t1 = now - parse_duration(str(since)), now
    if interval is not None and interval <= 0:
        raise HostgapError("--interval", f"{interval:g}: give seconds > 0")
    if calibrate and t1 is not None:
        raise HostgapError("--calibrate", "a class is calibrated on its live traffic: give no --end or --since")
    if calibrate and (not isinstance(calibrate_steps, int) or calibrate_steps < 8):
        raise HostgapError("--calibrate-steps", f"{calibrate_steps!r}: give a whole number >= 8")  # as watch's
    refs = [calibration] if isinstance(calibration, str) else list(calibration)
    if refs or (db and not calibrate):
        classes = class_calibrations(refs, db)
    elif db:  # --calibrate: the database's attach runs where it has some; the view takes its own
        classes = _stored_classes(db)
    else:
        classes = []
    conditions = parse_conditions(fail_if) if fail_if else []
    config = FleetConfig(
        prometheus,
        check_selector(match),
        start=t0,
        end=t1,
        interval_s=interval,
        duration_s=duration,
        hardware_label=hardware_label,
        lag_s=lag,
    )
    out = None
    if jsonl:
        try:
            out = open(jsonl, "a", encoding="utf-8")  # noqa: SIM115 - closed by FleetWatch
        except OSError as exc:
            raise HostgapError(jsonl, f"cannot write the --jsonl file ({exc.strerror or exc})") from None
    renewal = None
    if calibrate:
        from functools import partial

        from hostgap.server.fleet.renew import ClassRenewal, class_self_calibration
        from hostgap.server.watch.recalibrate import Policy

        make = partial(
            class_self_calibration,
            policy=Policy(max_age_s=recalibrate_after),
            steps=calibrate_steps,
            output=output,
            db=db,
            store=store,
            trace_dir=trace_dir,
            on_note=on_note,
        )
        renewal = ClassRenewal(classes, make, on_note=on_note, by_hardware=hardware_label is not None)
    session = FleetSession(
        config,
        classes,
        Prometheus(prometheus).query_range,
        conditions=conditions,
        jsonl=out,
        on_note=on_note,
        renewal=renewal,
    )
    for c in classes:
        on_note(f"class {c.engine}/{c.model}/{c.hardware or 'any'}: calibration {c.name}")

    def close() -> None:
        session.close()
        if out is not None:
            out.close()

    return FleetWatch(session, SCHEMA_VERSION, close)


def _stored_classes(db: str) -> list:
    """The class calibrations of the attach runs in ``db``, none where it holds none (or does
    not exist yet: ``--calibrate`` stores its own runs there)."""
    from pathlib import Path

    from hostgap.server.fleet.classes import class_calibrations
    from hostgap.store.database import RunsDB

    if not Path(db).exists():
        return []
    with RunsDB(db) as runs:
        if not runs.rows(limit=1, mode="attach"):
            return []
    return class_calibrations((), db)
