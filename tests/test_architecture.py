"""The house as docs/architecture.md describes it: at most eight floors in the layer contract, no two
modules with one name, the loader called from one analysis function only, the command line glue
over the API, and every package named in the architecture's table."""

from __future__ import annotations

import ast
import re
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "hostgap"

CLI_ALLOWED = {
    "hostgap",
    "hostgap.api",
    "hostgap.errors",
    # the one internal function a command without a public one wraps (docs/architecture.md)
    "hostgap.report.kineto_writer",  # trim: write_trimmed
    "hostgap.report.overlay",  # overlay: write_overlay
    "hostgap.report.compare",  # attach --fail-if: parse_conditions before the profile
    "hostgap.capture.protocol",  # sweep: cells.plan / run_grid
    "hostgap.capture.protocol.null_kernel",  # floor: measure_to_file
    "hostgap.capture.engines",  # harvest: the live harvest
    "hostgap.capture.engines.vllm_common",  # harvest: vllm_version before the run
    "hostgap.server.attach.profile",  # watch: sigterm_unwinds, attach's SIGTERM rule round the loop
    # the model commands without an API function of their own wrap one library function each
    "hostgap.model",  # fit: fit_sources; regimes: regimes.regime_map
    "hostgap.model.accounting",  # account: account
    "hostgap.model.arch",  # account: get_preset (the preset's error before the model)
    "hostgap.model.published",  # regimes --published: the published table
    # the text of the model and attribution commands (predict's is hostgap.predict's own)
    "hostgap.report",
    "hostgap.report.model_view",
    "hostgap.report.attribution_view",
}


def modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def imports_of(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hostgap"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("hostgap"))
    return out


def test_at_most_eight_floors():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = cfg["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    assert len(layers) <= 8
    named = {p.strip() for layer in layers for p in layer.split("|")}
    top = {p.stem if p.is_file() else p.name for p in SRC.iterdir() if not p.name.startswith(("_", "."))}
    top -= {"py"}  # py.typed
    assert {f"hostgap.{t}" for t in top} <= named, "every package is on a floor"


def test_no_two_modules_share_a_name():
    names = Counter(p.name for p in modules() if p.name != "__init__.py")
    assert [n for n, c in names.items() if c > 1] == []


def test_the_loader_has_one_caller_outside_readers():
    callers = [
        p.relative_to(SRC).as_posix()
        for p in modules()
        if "load_trace(" in p.read_text() and p.parent.name != "readers"
    ]
    assert callers == ["analysis/trace.py"]


def test_the_command_line_calls_the_api():
    for path in sorted((SRC / "cli").glob("*.py")):
        outside = {m for m in imports_of(path) if not m.startswith("hostgap.cli")} - CLI_ALLOWED
        assert outside == set(), f"{path.name} imports {sorted(outside)}"


def test_the_architecture_names_every_package():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    table = doc.split("## The floors, top to bottom")[1].split("##")[0]
    for p in SRC.iterdir():
        if p.is_dir() and (p / "__init__.py").exists():
            assert re.search(rf"`{p.name}/`", table), p.name
        elif p.suffix == ".py" and not p.name.startswith("_"):
            assert f"`{p.name}`" in table, p.name
