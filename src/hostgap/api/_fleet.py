"""The fleet through its Prometheus: ``rules`` (recording rules per calibrated class)."""

from __future__ import annotations

from collections.abc import Sequence
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
