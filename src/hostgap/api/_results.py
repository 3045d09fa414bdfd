"""What every result of the Python API has in common: its document (``to_dict()``, the object the
matching command prints with ``--json``), that JSON text (``to_json()``), the command's terminal
output (``print()``), a notebook view (``_repr_html_``) and tables as Arrow."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console


class Result:
    """A hostgap result. ``to_dict()`` is the JSON document the command line prints with
    ``--json`` (docs/json.md, docs/attach.md, ...): read it, do not change it in place."""

    kind: str = "result"

    def __init__(self, doc: Any):
        self._doc = doc

    def to_dict(self) -> Any:
        """The document (a dict; a list where the command prints several)."""
        return self._doc

    def to_json(self) -> str:
        """Exactly what the matching command prints with ``--json`` (without the final newline)."""
        from hostgap.report.terminal import dumps_json

        return dumps_json(self._doc)

    def print(self, file: IO[str] | None = None) -> None:
        """The command's terminal output, to ``file`` (default: standard output)."""
        from hostgap.report.terminal import Console, TrimmedLines

        out = file if file is not None else sys.stdout
        con = Console(file=TrimmedLines(out), width=max(140, Console().width) if file is None else 140)
        self._render(con)
        con.file.flush()

    def text(self) -> str:
        """The terminal output as text (140 columns, no colour)."""
        import io

        buf = io.StringIO()
        self.print(buf)
        return buf.getvalue()

    def csv_rows(self) -> list[dict]:
        """The rows the matching command prints with ``--csv``."""
        raise NotImplementedError(f"a {self.kind} result has no CSV form")

    def to_csv(self, file: IO[str] | None = None) -> None:
        """Exactly what the matching command prints with ``--csv``, to ``file`` (default: stdout)."""
        from hostgap.report.terminal import write_csv

        write_csv(self.csv_rows(), file)

    def _render(self, con: Console) -> None:
        con.print(self.to_json(), markup=False, highlight=False, soft_wrap=True)

    def _repr_html_(self) -> str:
        from hostgap.report.notebook import result_html

        return result_html(self.kind, self._doc)

    def __repr__(self) -> str:
        return f"<hostgap {self.kind}: {self._summary()}>"

    def _summary(self) -> str:
        return ""


def std_json(doc: Any) -> str:
    """JSON as ``measure``/``show``/``runs`` print it (``json.dumps``, indent 2)."""
    return json.dumps(doc, indent=2, default=str)


def arrow_table(rows: Iterable[dict], columns: list[str] | None = None) -> pa.Table:
    """An Arrow table of ``rows`` (dicts): columns in first-seen order (or ``columns``), nested
    values (dicts, lists) as JSON text, so every column has one scalar type."""
    import pyarrow as pa

    rows = list(rows)
    names: list[str] = list(columns or [])
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows:
            for k in r:
                seen.setdefault(k)
        names = list(seen)
    data = {}
    for c in names:
        vals = [r.get(c) for r in rows]
        if any(isinstance(v, (dict, list, tuple)) for v in vals):
            vals = [None if v is None else json.dumps(v, default=str) for v in vals]
        data[c] = _column(vals)
    return pa.table(data) if names else pa.table({})


def _column(vals: list) -> pa.Array:
    import pyarrow as pa

    try:
        return pa.array(vals)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # mixed types: text
        return pa.array([None if v is None else str(v) for v in vals], type=pa.string())
