"""The house as docs/architecture.md describes it: at most eight floors in the layer contract, no two
modules with one name, the loader called from one analysis function only, the command line glue
over the API, every package named in the architecture's table, nothing below the API importing
the package root, presentation apart from the measuring protocol and servers apart from the
readers, and no family of modules hidden in file names where a package would name it."""

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
    "hostgap.version",
    # the one internal function a command without a public one wraps (docs/architecture.md)
    "hostgap.report.kineto_writer",  # trim: write_trimmed
    "hostgap.report.overlay",  # overlay: write_overlay
    "hostgap.report.compare",  # attach --fail-if: parse_conditions before the profile
    "hostgap.capture.protocol",  # sweep: cells.plan / run_grid
    "hostgap.capture.protocol.null_kernel",  # floor: measure_to_file
    "hostgap.capture.engines",  # harvest: the live harvest
    "hostgap.capture.engines.vllm.common",  # harvest: vllm_version before the run
    "hostgap.server.attach.profile",  # watch: sigterm_unwinds, attach's SIGTERM rule round the loop
    # the model commands without an API function of their own wrap one library function each
    "hostgap.model",  # regimes: regimes.regime_map
    "hostgap.model.fitting",  # fit: fitting.sources
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


def _below_the_api() -> list[Path]:
    return [p for p in modules() if p.parent != SRC and p.relative_to(SRC).parts[0] not in ("api", "cli")]


def root_imports(path: Path) -> list[str]:
    """``import hostgap`` and ``from hostgap import X`` anywhere in a module, functions included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "hostgap" and node.level == 0:
            out += [f"from hostgap import {a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            out += [f"import {a.name}" for a in node.names if a.name == "hostgap"]
    return out


def test_root_imports_sees_both_forms(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import hostgap\ndef f():\n    from hostgap import SCHEMA_VERSION\nimport hostgap.version\n")
    assert root_imports(p) == ["import hostgap", "from hostgap import SCHEMA_VERSION"]


def test_nothing_below_the_api_imports_the_package_root():
    """The root is the lazy API façade: a module below ``api/`` that imports it runs an arrow back
    up to the top of the house (the version constants live in ``hostgap/version.py``)."""
    found = {p.relative_to(SRC).as_posix(): root_imports(p) for p in _below_the_api()}
    assert {k: v for k, v in found.items() if v} == {}
    assert len(found) > 100  # the scan saw the house


def _reaches(pkg: str, forbidden: str) -> dict[str, list[str]]:
    out = {}
    for p in sorted((SRC / pkg).rglob("*.py")):
        bad = sorted(m for m in imports_of(p) if m == f"hostgap.{forbidden}" or m.startswith(f"hostgap.{forbidden}."))
        if bad:
            out[p.relative_to(SRC).as_posix()] = bad
    return out


def test_presentation_reads_nothing_from_the_measuring_protocol():
    assert _reaches("report", "capture") == {}


def test_servers_read_traces_through_the_analysis_only():
    assert _reaches("server", "readers") == {}
    assert _reaches("server", "analysis")  # and they do go through it


def test_the_forbidden_imports_are_contracts_too():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pairs = {
        (tuple(c["source_modules"]), tuple(c["forbidden_modules"]))
        for c in cfg["tool"]["importlinter"]["contracts"]
        if c["type"] == "forbidden"
    }
    assert (("hostgap.report",), ("hostgap.capture",)) in pairs
    assert (("hostgap.server",), ("hostgap.readers",)) in pairs


def shared_prefixes(names: list[str]) -> dict[str, list[str]]:
    """Name prefixes (the part before the first ``_``) that three or more module names share."""
    groups: dict[str, list[str]] = {}
    for n in sorted(names):
        groups.setdefault(n.split("_")[0], []).append(n)
    return {k: v for k, v in groups.items() if len(v) >= 3}


def test_shared_prefixes():
    assert shared_prefixes(["whatif", "whatif_cpu", "whatif_overlap", "tp", "fit_a"]) == {
        "whatif": ["whatif", "whatif_cpu", "whatif_overlap"]
    }
    assert shared_prefixes(["nsys", "nsys_db", "kineto"]) == {}


def test_no_family_of_modules_is_hidden_in_file_names():
    """Three modules of one package whose names share a prefix are a package not made."""
    found = {}
    for d in sorted({p.parent for p in modules()}):
        stems = [p.stem for p in d.glob("*.py") if not p.name.startswith("_")]
        if shared := shared_prefixes(stems):
            found[d.relative_to(SRC).as_posix()] = shared
    assert found == {}
