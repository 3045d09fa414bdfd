"""The compiled Kineto decoder built with AddressSanitizer and UndefinedBehaviorSanitizer, run
over the fuzz generators' Kineto inputs (both decoders compared on each), the hostile chunks the
decoder must refuse, and every corpus trace and fixture: any out-of-bounds access, use after
free or undefined behaviour aborts the child and fails the test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import TRACES

ROOT = Path(__file__).resolve().parents[1]
LOAD = ROOT / "src" / "hostgap" / "readers"
INPUTS = int(os.environ.get("HOSTGAP_SANITIZE_INPUTS", "600"))

CHILD = r"""
import glob, os, random, sys, tempfile
sys.path.insert(0, sys.argv[1])
from hostgap.readers import _kcolumns
from hostgap.readers.kineto import compiled as kineto_columns
assert _kcolumns.__file__.startswith(sys.argv[1]), _kcolumns.__file__
import importlib.util
spec = importlib.util.spec_from_file_location("fz", sys.argv[2]); fz = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fz)
hostile = [b"", b"[", b"[{", b'[{"ph": "X", "ts": 1', b"[" * 100000, b'[{"name": "' + b"x" * 1000000 + b'"}]',
           b'[{' + b", ".join(b'"k%d": %d' % (i, i) for i in range(20000)) + b'}]',
           b'[{"args": {' + b", ".join(b'"a%d": "%d"' % (i, i) for i in range(20000)) + b'}}]',
           b'[{"ts": ' + b"9" * 100000 + b', "dur": -' + b"1" * 5000 + b'.5}]', b'[{"x": "\\ud800"}]']
sc = _kcolumns.scratch()
for h in hostile * 2:  # with a scratch too, reused after each hostile chunk
    _kcolumns.decode(h); _kcolumns.decode(h, sc); _kcolumns.number_ns(h[:64])
n = differ = 0
rng = random.Random(int(sys.argv[3]))
with tempfile.TemporaryDirectory() as d:
    for i in range(int(sys.argv[4])):
        data, suffix, _ = fz.kineto_input(rng)
        p = os.path.join(d, f"c{i}{suffix}")
        open(p, "wb").write(data)
        diff = fz.decoders_differ(p)
        differ += bool(diff)
        if diff: print("differ:", i, diff)
        n += 1
        os.unlink(p)
for p in sys.argv[5:]:
    differ += bool(fz.decoders_differ(p)); n += 1
print(f"inputs {n} differ {differ}")
sys.exit(1 if differ else 0)
"""


@pytest.mark.slow
def test_fuzz_inputs_under_address_and_ub_sanitizers(tmp_path):
    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("gcc not found: the sanitizer build needs it")
    asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    ubsan = subprocess.run([cc, "-print-file-name=libubsan.so"], capture_output=True, text=True).stdout.strip()
    if not (os.path.isabs(asan) and os.path.isabs(ubsan)):
        pytest.skip("libasan/libubsan not installed")
    tree = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "hostgap", tree / "hostgap", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    out = tree / "hostgap" / "readers" / ("_kcolumns" + sysconfig.get_config_var("EXT_SUFFIX"))
    build = [
        cc,
        "-shared",
        "-fPIC",
        "-O1",
        "-g",
        "-fno-omit-frame-pointer",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=undefined",
        "-DYYJSON_DISABLE_WRITER=1",
        "-DYYJSON_DISABLE_UTILS=1",
        "-DYYJSON_DISABLE_NON_STANDARD=1",
        f"-I{sysconfig.get_paths()['include']}",
        f"-I{LOAD}",
        str(LOAD / "_kcolumns.c"),
        str(LOAD / "_yyjson" / "yyjson.c"),
        "-o",
        str(out),
    ]
    subprocess.run(build, check=True, capture_output=True)
    files = sorted(map(str, TRACES.glob("*/*.json.gz"))) + sorted(
        map(str, (ROOT / "tests" / "data").rglob("*.json.gz"))
    )
    env = {
        **os.environ,
        "LD_PRELOAD": f"{asan}:{ubsan}",
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "PYTHONPATH": str(tree),
    }
    env.pop("HOSTGAP_PURE_PYTHON", None)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(ROOT / "bench" / "fuzz.py"), "34", str(INPUTS), *files],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    assert f"inputs {INPUTS + len(files)} differ 0" in r.stdout
    assert "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr
