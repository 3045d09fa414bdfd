"""The levers every result carries (docs/advise.md): the ``levers`` key of a trace's analysis and
of a measured or attached run's results, and its Arrow table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostgap.api._results import arrow_table
from hostgap.errors import HostgapError

if TYPE_CHECKING:
    import pyarrow as pa

LEVER_COLUMNS = [
    "lever",
    "applicable",
    "reason",
    "target",
    "step_ns",
    "step_ns_ci",
    "tokens_per_s",
    "gain",
    "regime_after",
    "basis",
    "validated",
]


def levers_of(doc: dict, preset: str | None = None, gpu: str | None = None) -> dict:
    """The levers document of an ``analyze --json`` document or a run's results (``today``,
    ``notes``, ``levers``), or ``{"levers": [], "notes": [why]}`` where the input has nothing to
    advise on: the ``levers`` key the other commands' documents carry."""
    from hostgap.model.levers.baseline import baseline
    from hostgap.model.levers.ranked import document

    try:
        return document(baseline(doc, preset, gpu), gpu)
    except HostgapError as e:
        return {"today": None, "notes": [str(e)], "levers": []}


def with_levers(doc):
    """``doc`` with the ``levers`` key its command's ``--json`` carries (docs/advise.md): a trace's
    analysis, a rank set's, a measured or attached run's results; other documents unchanged."""
    if not isinstance(doc, dict) or "levers" in doc:
        return doc
    watch = (doc.get("kind") == "watch" and isinstance(doc.get("watch"), dict)) or (
        isinstance(doc.get("intervals"), list) and "url" in doc
    )
    advisable = (
        "steps" in doc
        or "ranks" in doc
        or isinstance(doc.get("differencing"), dict)
        or isinstance(doc.get("analysis"), dict)
        or watch
    )
    if not advisable:
        return doc
    try:
        rows = levers_of(doc)["levers"]
    except (ValueError, TypeError, KeyError) as e:  # a document from an older hostgap: no levers, said so
        rows = [{"lever": None, "applicable": False, "reason": f"levers not computed: {e!r}"}]
    return {**doc, "levers": rows}


def levers_table(levers: list[dict]) -> pa.Table:
    """The lever rows as Arrow (target and interval as JSON text)."""
    return arrow_table(levers, LEVER_COLUMNS)
