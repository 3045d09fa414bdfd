"""The package people install: one version source, a typed package, ``import hostgap`` without
torch, and (slow) ``python -m build``'s sdist and wheel installed in fresh virtual environments,
the wheel with the compiled decoder and the sdist where no C compiler works, each running
``hostgap --version`` and ``hostgap.analyze`` on a vendored trace."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import vendored_path

ROOT = Path(__file__).resolve().parents[1]
TRACE = vendored_path("tracelens/mi300x_vllm_decode_fullgraph.json.gz")
OPTIONAL = ("torch", "transformers", "vllm", "ray")
"""Never installed with hostgap itself (extras, or a separate environment for vLLM)."""


def hostgap_command() -> list[str]:
    """The ``hostgap`` console script of this environment (``python -m hostgap`` without one)."""
    script = Path(sys.executable).parent / "hostgap"
    return [str(script)] if script.exists() else [sys.executable, "-m", "hostgap"]


def test_one_version_source():
    """pyproject.toml reads the version from hostgap.version.__version__ (the ground floor; the
    package root re-exports it); the command and the installed distribution's metadata say the same."""
    import hostgap

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hostgap.version.__version__"}
    r = subprocess.run([*hostgap_command(), "--version"], capture_output=True, text=True, check=True)
    assert r.stdout.split()[-1] == hostgap.__version__ == importlib.metadata.version("hostgap")


def test_the_package_is_typed():
    import hostgap

    assert (Path(hostgap.__file__).parent / "py.typed").is_file()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["hostgap"]


def test_import_and_analyze_without_the_optional_packages():
    """torch, transformers, vLLM and ray made unimportable: ``import hostgap`` and the analysis
    of a trace still work (the capture extras are imported only by capture)."""
    code = (
        "import sys\n"
        f"for name in {OPTIONAL!r}: sys.modules[name] = None  # import raises ImportError\n"
        "import hostgap\n"
        f"r = hostgap.analyze({str(TRACE)!r})\n"
        "print(r.verdict['verdict'])\n"
        f"assert not [m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r} and sys.modules[m] is not None]\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["incomplete-capture"]


# -- the sdist and the wheel, installed ------------------------------------------------------

BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "src")


def _env(**extra: str) -> dict[str, str]:
    """The environment of a command in a fresh venv: nothing of this checkout on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HOSTGAP_PURE_PYTHON", "VIRTUAL_ENV")}
    return {**env, **extra}


def _run(cmd: list, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(**env), capture_output=True, text=True)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _constraints(path: Path) -> Path:
    """requirements/lock.txt without the optional heavy packages: hostgap's dependencies resolve
    to the tested versions and nothing pulls torch in."""
    lines = (ROOT / "requirements" / "lock.txt").read_text().splitlines()
    keep = [l for l in lines if l.split("==")[0].strip().lower() not in OPTIONAL]
    path.write_text("\n".join(keep) + "\n")
    return path


def _install(work: Path, name: str, *pip_steps: tuple[list, dict[str, str]]) -> tuple[Path, str]:
    """A fresh venv ``work/name`` (no system site packages), the pip steps run in it; the venv
    and the output of the last step."""
    venv = work / name
    _run([sys.executable, "-m", "venv", venv], work)
    out = ""
    for args, env in pip_steps:
        r = _run([venv / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", *args], work, **env)
        out = r.stdout + r.stderr
    return venv, out


def _use(venv: Path, work: Path) -> dict:
    """What the installed hostgap says: version, verdict on the vendored trace, decoder, extras."""
    py = venv / "bin" / "python"
    version = _run([venv / "bin" / "hostgap", "--version"], work).stdout.split()[-1]
    analyzed = _run(
        [py, "-c", f"import hostgap; r = hostgap.analyze({str(TRACE)!r}); print(r.verdict['verdict'])"], work
    )
    probe = _run(
        [
            py,
            "-c",
            "import importlib.util as u, pathlib, hostgap\n"
            "print(pathlib.Path(hostgap.__file__).parent)\n"
            "print(u.find_spec('hostgap.readers._kcolumns') is not None)\n"
            f"print(sorted(n for n in {OPTIONAL!r} if u.find_spec(n) is not None))\n"
            "import importlib.metadata as m; print(m.version('hostgap'))",
        ],
        work,
    ).stdout.splitlines()
    return {
        "version": version,
        "verdict": analyzed.stdout.strip(),
        "notes": [l for l in analyzed.stderr.splitlines() if l.startswith("hostgap: note:")],
        "package": Path(probe[0]),
        "compiled": probe[1] == "True",
        "optional": probe[2],
        "metadata_version": probe[3],
    }


@pytest.fixture
def work_dir():
    """A temporary folder removed at the end whatever happens (two venvs: hundreds of MB)."""
    d = Path(tempfile.mkdtemp(prefix="hostgap-packaging-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_sdist_and_wheel_install_in_fresh_venvs(work_dir):
    pytest.importorskip("build", reason="python -m build needs the build package (the dev extra)")
    import hostgap

    # build from a copy of what the build reads: the checkout stays as it was (no build/, egg-info)
    src = work_dir / "src-tree"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "build")
    for name in BUILD_INPUTS:
        p = ROOT / name
        (shutil.copytree(p, src / name, ignore=ignore) if p.is_dir() else shutil.copy2(p, src / name))
    dist = work_dir / "dist"
    _run([sys.executable, "-m", "build", "--outdir", dist, src], work_dir)
    (sdist,) = dist.glob("hostgap-*.tar.gz")
    (wheel,) = dist.glob("hostgap-*.whl")
    assert sdist.name == f"hostgap-{hostgap.__version__}.tar.gz"

    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in (
        "README.md",
        "LICENSE",
        "setup.py",
        "pyproject.toml",
        "src/hostgap/py.typed",
        "src/hostgap/model/paper_cells.json",
        "src/hostgap/readers/_kcolumns.c",
        "src/hostgap/readers/_yyjson/yyjson.c",
        "src/hostgap/readers/_yyjson/yyjson.h",
        "src/hostgap/readers/_yyjson/LICENSE",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.endswith((".so", ".pyc")) or n.startswith("tests/")]
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
    assert {"hostgap/py.typed", "hostgap/model/paper_cells.json", "hostgap/readers/_yyjson/LICENSE"} <= in_wheel
    assert not [n for n in in_wheel if n.endswith((".c", ".h"))]
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    compiler = shutil.which(cc) is not None
    assert any(re.fullmatch(r"hostgap/readers/_kcolumns\..*\.so", n) for n in in_wheel) == compiler

    # the dependencies from pip's cache at the locked versions; the sdist built with no working
    # compiler and with pip's wheel cache off (so that no compiler-less wheel stays cached)
    constraints = _constraints(work_dir / "constraints.txt")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    no_cc = {"CC": "/bin/false", "CXX": "/bin/false", "LDSHARED": "/bin/false"}
    with ThreadPoolExecutor(2) as pool:
        wheel_job = pool.submit(_install, work_dir, "venv-wheel", (["-c", constraints, wheel], {}))
        sdist_job = pool.submit(
            _install,
            work_dir,
            "venv-sdist",
            (["-c", constraints, *deps], {}),
            (["-v", "--no-deps", "--no-cache-dir", sdist], no_cc),
        )
        (venv_wheel, _), (venv_sdist, sdist_log) = wheel_job.result(), sdist_job.result()
    # setup.py's one note: the extension was not built, the pure-Python decoder will be used
    assert sdist_log.count("hostgap: note: the compiled Kineto decoder was not built") == 1, sdist_log[-3000:]
    for venv in (venv_wheel, venv_sdist):
        _run([venv / "bin" / "python", "-m", "pip", "check"], work_dir)

    got_wheel, got_sdist = _use(venv_wheel, work_dir), _use(venv_sdist, work_dir)
    for got, venv in ((got_wheel, venv_wheel), (got_sdist, venv_sdist)):
        assert got["version"] == got["metadata_version"] == hostgap.__version__
        assert got["verdict"] == "incomplete-capture"  # as the checkout says on this trace
        assert got["package"].is_relative_to(venv)  # the installed copy, not this checkout
        assert (got["package"] / "py.typed").is_file()
        assert got["optional"] == "[]"  # no torch, transformers, vLLM or ray came along
    assert got_wheel["compiled"] == compiler
    if compiler:
        assert got_wheel["notes"] == []  # the compiled decoder, silently
    # the pure-Python decoder, with the loader's one note
    assert got_sdist["compiled"] is False
    assert len(got_sdist["notes"]) == 1 and "not built" in got_sdist["notes"][0]
