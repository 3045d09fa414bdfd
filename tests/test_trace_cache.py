"""The analysis cache (hostgap.analysis.trace_cache, docs/input.md "The cache"): a later command on
the same file reads the cache instead of decoding, with the same output byte for byte; an entry
that is damaged in any way, a file changed in place, two processes filling one entry and a full
cache each end in a correct result, never in a wrong number, a crash or a hang."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostgap.analysis import trace_cache as C
from hostgap.cli import cli
from test_examples import decode_trace

VERBS = (("analyze", "--json"), ("steps", "--json"), ("kernels", "--json"), ("analyze", "--csv"))


@pytest.fixture
def cache_env(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("HOSTGAP_CACHE_DIR", str(root))
    monkeypatch.setenv("HOSTGAP_CACHE_MIN", "0")
    monkeypatch.delenv("HOSTGAP_NO_CACHE", raising=False)
    monkeypatch.delenv("HOSTGAP_CACHE_MAX", raising=False)
    return root


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Every decode of a trace file (the cache's misses)."""
    import hostgap.readers as readers

    calls: list[str] = []
    original = readers.load_trace

    def spy(path, **kw):
        calls.append(path)
        return original(path, **kw)

    monkeypatch.setattr(readers, "load_trace", spy)
    return calls


def run(*args: str) -> tuple[str, str]:
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code == 0, r.output
    return r.stdout, r.stderr


def reference(path: str) -> dict:
    """The outputs with the cache off."""
    os.environ["HOSTGAP_NO_CACHE"] = "1"
    try:
        return {v: run(v[0], path, v[1])[0] for v in VERBS}
    finally:
        del os.environ["HOSTGAP_NO_CACHE"]


def entry_dir(root: Path) -> Path:
    (d,) = list((root / f"v{C.FORMAT}").iterdir())
    return d


def test_a_second_look_does_not_decode(cache_env, loads, tmp_path):
    path = str(decode_trace(tmp_path / "t.json.gz", 40.0))
    ref = reference(path)
    loads.clear()
    first = {v: run(v[0], path, v[1])[0] for v in VERBS}
    assert len(loads) == 1  # decoded once, then every command reads the entry
    loads.clear()
    second = {v: run(v[0], path, v[1])[0] for v in VERBS}
    assert loads == [] and first == ref and second == ref
    parts = sorted(p.name for p in entry_dir(cache_env).iterdir() if p.is_dir())
    assert parts[:2] == ["events", "links"] and any(p.endswith("-kernels") for p in parts)
    # another spelling of the same file: its own path in the documents, the same entry
    os.chdir(tmp_path)
    rel = run("analyze", "t.json.gz", "--json")[0]
    assert json.loads(rel)["trace"] == "t.json.gz" and loads == []
    assert rel.replace('"t.json.gz"', json.dumps(path)) == ref[("analyze", "--json")]


def test_no_cache_and_small_files_leave_nothing(cache_env, tmp_path, monkeypatch):
    path = str(decode_trace(tmp_path / "t.json", 40.0))
    run("analyze", path, "--json", "--no-cache")
    assert not cache_env.exists()
    monkeypatch.setenv("HOSTGAP_CACHE_MIN", str(10**9))
    run("analyze", path, "--json")
    assert not cache_env.exists()


DAMAGE = ("truncate", "flip", "other-file", "not-json", "remove")


def damage(entry: Path, target: str, how: str, rng: random.Random) -> None:
    files = sorted(p for p in entry.rglob("*") if p.is_file() and p.name != C.USED)
    files = [p for p in files if target in str(p.relative_to(entry))] or files
    p = rng.choice(files)
    data = bytearray(p.read_bytes())
    if how == "truncate":
        p.write_bytes(data[: len(data) // 2])
    elif how == "flip":
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        p.write_bytes(bytes(data))
    elif how == "other-file":  # an entry made for another file (its manifest names it)
        m = p.parent / C.MANIFEST
        doc = json.loads(m.read_text())
        doc["identity"]["inode"] += 1
        m.write_text(json.dumps(doc))
    elif how == "not-json":
        (p.parent / C.MANIFEST).write_text("{not json")
    else:
        p.unlink()


@pytest.mark.parametrize("target", ["events", "links", "-anatomy", "-overview", "-kernels", "names.json", "meta"])
@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_entry_is_rebuilt_with_one_note(cache_env, tmp_path, target, how):
    path = str(decode_trace(tmp_path / "t.json.gz", 40.0))
    ref = reference(path)
    for v in VERBS:
        run(v[0], path, v[1])
    damage(entry_dir(cache_env), target, how, random.Random(f"{target}{how}"))
    outs = {v: CliRunner().invoke(cli, [v[0], path, v[1]]) for v in VERBS}
    assert all(r.exit_code == 0 for r in outs.values())
    assert {v: r.stdout for v, r in outs.items()} == ref
    notes = [ln for r in outs.values() for ln in r.stderr.splitlines() if "cache entry" in ln]
    assert len(notes) <= 1 and all("unusable" in n and "rebuilt" in n for n in notes)
    assert {v: run(v[0], path, v[1])[0] for v in VERBS} == ref  # and the rebuilt entry reads back right


def test_a_cached_document_is_served_without_touching_the_event_table(cache_env, loads, tmp_path):
    """A command whose document the entry holds reads neither the trace file nor the entry's
    event table: a damaged table is noticed (and rebuilt) only by a command that needs it."""
    path = str(decode_trace(tmp_path / "t.json.gz", 40.0))
    first = run("steps", path, "--json")[0]
    events = entry_dir(cache_env) / "events"
    assert (events / C.MANIFEST).is_file()
    for npy in events.glob("*.npy"):
        npy.write_bytes(b"damaged")
    loads.clear()
    out, err = run("steps", path, "--json")
    assert (out, loads) == (first, [])
    assert "cache entry" not in err


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_fuzzed_entries_never_give_a_wrong_number(cache_env, tmp_path, seed):
    rng = random.Random(seed)
    shutil.rmtree(cache_env, ignore_errors=True)  # one example, one entry
    path = str(decode_trace(tmp_path / "f.json.gz", rng.choice([1.0, 40.0])))
    ref = reference(path)
    for v in VERBS:
        run(v[0], path, v[1])
    entry = entry_dir(cache_env)
    for _ in range(rng.randint(1, 4)):
        files = [p for p in entry.rglob("*") if p.is_file()]
        p = rng.choice(files)
        data = bytearray(p.read_bytes())
        if data:
            i = rng.randrange(len(data))
            data[i : i + rng.randint(1, 8)] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 8)))
            p.write_bytes(bytes(data))
    outs = {v: CliRunner().invoke(cli, [v[0], path, v[1]]) for v in VERBS}
    assert {v: r.stdout for v, r in outs.items()} == ref, seed
    assert all(r.exit_code == 0 and "Traceback" not in r.output for r in outs.values())


def test_a_file_changed_in_place_with_its_size_and_time_kept(cache_env, tmp_path):
    p = tmp_path / "t.json"
    decode_trace(p, 40.0)
    a = reference(str(p))
    run("analyze", str(p), "--json")
    st = p.stat()
    text = p.read_text()
    changed = text.replace('"dur": 10.0', '"dur": 20.0', 3)  # same length, other numbers
    assert len(changed) == len(text) and changed != text
    p.write_text(changed)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # the modification time put back
    out = run("analyze", str(p), "--json")[0]
    assert out == reference(str(p))[("analyze", "--json")] != a[("analyze", "--json")]


def test_two_processes_filling_one_entry(cache_env, tmp_path):
    path = str(decode_trace(tmp_path / "t.json.gz", 40.0))
    ref = reference(path)[("analyze", "--json")]
    env = {**os.environ, "HOSTGAP_CACHE_DIR": str(cache_env), "HOSTGAP_CACHE_MIN": "0"}
    for _ in range(2):
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "hostgap", "analyze", path, "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                text=True,
            )
            for _ in range(3)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
        assert [o for o, _ in outs] == [ref] * 3
    assert not [p for p in entry_dir(cache_env).iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_the_cap_evicts_the_least_recently_used(cache_env, tmp_path, monkeypatch):
    a = str(decode_trace(tmp_path / "a.json", 40.0, steps=40))
    b = str(decode_trace(tmp_path / "b.json", 1.0, steps=40))
    run("analyze", a, "--json")
    one = C.entries(cache_env)[0].size_bytes
    monkeypatch.setenv("HOSTGAP_CACHE_MAX", str(int(one * 1.5)))
    run("analyze", b, "--json")
    listed = json.loads(run("cache", "--json")[0])
    assert [e["path"] for e in listed["entries"]] == [os.path.realpath(b)]
    assert listed["total_bytes"] <= int(one * 1.5)
    cleared = json.loads(run("cache", "--clear", "--json")[0])
    assert cleared["cleared"]["entries"] == 1 and cleared["entries"] == []
    monkeypatch.setenv("HOSTGAP_CACHE_MAX", "0")
    run("analyze", a, "--json")
    assert C.entries(cache_env) == []  # a cap of 0 keeps nothing


def test_bad_cap_is_one_line(cache_env, tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTGAP_CACHE_MAX", "lots")
    r = CliRunner().invoke(cli, ["cache"])
    assert r.exit_code == 2 and "HOSTGAP_CACHE_MAX: 'lots' is not a byte count" in r.stderr


def test_analyse_trace_fills_the_cache_by_default(cache_env, tmp_path):
    from hostgap.analysis.trace import analyse_trace

    path = str(decode_trace(tmp_path / "t.json.gz", 40.0))
    analyse_trace(path).anatomy_dict()
    assert (entry_dir(cache_env) / "events" / C.MANIFEST).is_file()


def test_each_ranking_length_has_its_own_cached_document(cache_env, loads):
    """The step anatomy of one trace at two ``top`` values, each computed in a fresh analysis
    after the other was cached: each keeps its own ranking length, never the other's."""
    from conftest import corpus_path
    from hostgap.analysis.trace import analyse_trace

    path = str(corpus_path("tracelens/h100_qwen1.5-0.5b.json.gz", vendored=True))
    analyse_trace(path).anatomy_dict()  # the default top, cached
    fresh = {top: analyse_trace(path, cache=False).anatomy_dict(top) for top in (2, 5)}
    for top in (2, 5, 2):
        assert analyse_trace(path).anatomy_dict(top) == fresh[top]
    assert fresh[2] != fresh[5]


def test_python_frames_come_back_from_the_cache(cache_env, loads):
    """A trace with Python frames: the second look's kernel rows name the same frames as the
    first (the cache keeps the frame of every event, not a broadcast of none)."""
    from conftest import corpus_path

    path = str(corpus_path("tracelens/h100_qwen1.5-0.5b.json.gz", vendored=True))
    ref = reference(path)
    first = run("kernels", path, "--json")[0]
    loads.clear()
    second = run("kernels", path, "--json")[0]
    assert loads == [] and first == second == ref[("kernels", "--json")]
    assert any(r["frame"] for r in json.loads(second))


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.delenv("HOSTGAP_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert C.cache_dir() == tmp_path / "xdg" / "hostgap"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert C.cache_dir() == tmp_path / "home" / ".cache" / "hostgap"
    monkeypatch.setenv("HOSTGAP_CACHE_DIR", str(tmp_path / "mine"))
    assert C.cache_dir() == tmp_path / "mine"


def test_another_files_part_is_never_served(cache_env, tmp_path):
    """A part copied from another trace's entry (its own manifest intact, naming the other file)
    is refused: the command decodes its own file again, says so once, and prints its own numbers."""
    a = str(decode_trace(tmp_path / "a.json.gz", 40.0))
    b = str(decode_trace(tmp_path / "b.json.gz", 10.0))
    ref_b = reference(b)
    assert ref_b != reference(a)
    for path in (a, b):
        run("steps", path, "--json")
    root = cache_env / f"v{C.FORMAT}"
    by_path = {C._identity_of(d)["path"]: d for d in root.iterdir()}
    ea, eb = by_path[os.path.realpath(a)], by_path[os.path.realpath(b)]
    for part in [p.name for p in eb.iterdir() if p.is_dir()]:
        shutil.rmtree(eb / part)
        shutil.copytree(ea / part, eb / part)
    r = CliRunner().invoke(cli, ["steps", b, "--json"])
    assert r.exit_code == 0 and r.stdout == ref_b[("steps", "--json")]
    assert sum("cache entry" in ln and "rebuilt" in ln for ln in r.stderr.splitlines()) == 1


def test_the_listing_names_parts_only(cache_env, tmp_path):
    """An entry's parts are its folders: not its last-used marker, not a part half-written by
    another process (a hidden temporary folder)."""
    path = str(decode_trace(tmp_path / "t.json.gz", 40.0))
    run("steps", path, "--json")
    d = entry_dir(cache_env)
    (d / ".events-half").mkdir()
    parts = {p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")}
    (listed,) = C.entries(cache_env)
    assert set(listed.parts) == parts and C.USED not in listed.parts and ".events-half" not in listed.parts
    assert "events" in listed.parts


def test_the_fingerprint_blocks_spread_over_the_whole_file():
    """The identity's sampled blocks start evenly from the first byte to the last block (the
    docstring's example as a test): BLOCKS offsets, the first 0, the last size - BLOCK."""
    from hostgap.analysis import trace_cache as C

    size = 8 * 2**20
    off = C._offsets(size)
    assert len(off) == C.BLOCKS and off[0] == 0 and off[-1] == size - C.BLOCK
    assert off[1] == round((size - C.BLOCK) / (C.BLOCKS - 1)) == 1189010
    assert C._offsets(100) == [0]
