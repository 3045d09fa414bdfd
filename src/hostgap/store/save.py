"""Storing a run, whatever made it: measured (``measure``, ``sweep``), attached (``attach``) or
watched (``watch``). One function, :func:`save_run`, writes its files into the run directory,
``results.json`` last (the directory counts as complete from then on), and adds its row to the
runs database; every kind of run goes through it, so ``runs``, ``show``, ``report`` and
``compare`` find each the same way. :func:`run_kind` says which kind a stored run is."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hostgap.errors import HostgapError
from hostgap.store.rundir import RunDir, file_mode

RUN_KINDS = ("measured", "attached", "watched")
"""The kinds of stored run (a trace file given to ``report`` or ``compare`` is a fourth kind of
input, ``trace``, never stored)."""


def run_kind(results: dict) -> str:
    """``measured``, ``attached`` or ``watched`` for a stored run's results.

    >>> run_kind({"mode": "attach"}), run_kind({"kind": "watch"}), run_kind({"mode": "eager"})
    ('attached', 'watched', 'measured')
    """
    if results.get("kind") == "watch" or results.get("mode") == "watch":
        return "watched"
    if results.get("mode") == "attach":
        return "attached"
    return "measured"


def save_run(
    results: dict,
    run: RunDir,
    db: str | os.PathLike | None = None,
    *,
    files: dict[str, object] | None = None,
    to_db: bool = True,
) -> str:
    """Write ``files`` (name -> JSON-able object, or text for names not ending in ``.json``) and
    then ``results.json`` into ``run``, and add the run's row to the runs database ``db``
    (``$HOSTGAP_DB`` or the default when None) unless ``to_db`` is false. ``results["run_dir"]``
    is the caller's (a measured run keeps the path it was given). Returns the run directory's
    absolute path."""
    from hostgap.store.database import RunsDB

    for name, content in (files or {}).items():
        if name.endswith(".json"):
            run.write_json(name, content)
        else:
            write_text_atomic(str(run.path / name), str(content))
    run.write_json("results.json", results)
    if to_db:
        with RunsDB(db) as rdb:
            rdb.add(results)
    return str(Path(run.path).resolve())


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, renamed over it:
    a reader sees the old file or the new one, never half of one; a failure leaves the old one."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        raise HostgapError(path, "output folder does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".hostgap-", suffix=".tmp")
    except OSError as e:
        raise HostgapError(path, f"cannot write ({e.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise HostgapError(path, f"cannot write ({e.strerror})") from None
