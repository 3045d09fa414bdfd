"""Mutants of the corpus's Kineto traces, each decoded three ways: by the compiled decoder on one
thread, by the pure-Python decoder, and by the compiled decoder on two threads with tiny chunks
(so that many cuts are proposed inside strings and nested values). Every mutant must give the
same outcome all three ways: the same columns, names and metadata, or the same one-line error.

    .venv/bin/python bench/mutate_traces.py -n 1000 --seed 1
    .venv/bin/python bench/mutate_traces.py -n 1000 --seed 1 --sanitize    # ASan + UBSan build
    .venv/bin/python bench/mutate_traces.py -n 200 --keep /tmp/differing   # keep the differing ones

A mutant is a window of up to a few thousand consecutive events of a corpus trace (with the
trace's top-level metadata), changed by one to six mutations (:data:`MUTATIONS`): numbers
written as strings in many spellings (``" 12 "``, ``"+12"``, ``"007"``, other scripts' digits,
``"1_2"``), number texts the fast timestamp path leaves to the exact one (exponents, a fourth
decimal, 17+ digits, ``-0``), type swaps and extreme values in every field the loader reads,
duplicated keys, escapes, surrogates and non-ASCII in strings, args that are not objects or are
nested past the compiled decoder's depth limit, odd phases and categories, events that are not
objects, text between and around events (whitespace, ``}, {`` inside strings); then, sometimes,
a byte-level change (a flip, invalid UTF-8, a raw control character, truncation). Written as
JSON, or as gzip.

``--sanitize`` builds the compiled decoder with AddressSanitizer and UndefinedBehaviorSanitizer
(:func:`build_sanitized`) into a temporary copy of the package and runs the mutants there: the
first sanitizer report aborts the run (exit status non-zero, the report on stderr). Exit status
1 when any mutant decodes differently or raises anything but hostgap's own error.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "traces"
LOAD = ROOT / "src" / "hostgap" / "readers"

# -- mutations ---------------------------------------------------------------------------------

INT_FIELDS = ("pid", "tid")
ARG_INTS = ("correlation", "External id", "external id", "device", "stream", "bytes")
FIELDS = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args")
DIGITS = {"arabic": "\u0660", "fullwidth": "\uff10", "devanagari": "\u0966"}


def spellings(v: int) -> list[str]:
    """A number written as a string, every way a writer or a corruption might."""
    s = str(v)
    other = ["".join(chr(ord(z) + int(c)) for c in s.lstrip("-")) for z in DIGITS.values()]
    return [s, f" {s} ", f" {s}", f"{s} ", f"+{s}", f"0{s}", f"-{s}", f"{s}.0", f"1_{s}", f"{s}e0", "", "-", *other]


RAW_NUMBERS = [
    "1E+3",
    "1.5e3",
    "0.5e-3",
    "1.0000000001",
    "1661203462598772.1234",
    "12345678901234567",
    "123456789012345678901",
    "-0",
    "-0.0",
    "4611686018427387.904",
    "4611686018427387.903",
    "-4611686018427387.904",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "1e999",
    "-1e-999",
    "0.001",
    "5.0005",
]
ODD_VALUES = [None, True, False, [], {}, [1], {"v": 1}, 1.5, 0.0, 2**63, -(2**63) - 1, 10**30, 1e308, "x", "Spans"]
ODD_STRINGS = [
    'q"uote',
    "back\\slash",
    "caf\u00e9",
    "\U0001f600",
    "\u4e2d\u6587",
    "}, {",
    '}, {"ph": "X"}, {',
    "\u2028",
    "tab\there",
    "x" * 100_000,
]
RAW_STRINGS = ['"\\ud800"', '"\\udc00x"', '"\\ud83d\\ude00"', '"\\u0000"', '"a\\/b"', '"\\b\\f\\n\\r\\t"']


class Doc:
    """A mutant under construction: the document, and raw-text replacements applied after it is
    serialised (``"__RAW_k__"`` → any JSON text, e.g. a number json.dumps cannot write or a key
    given twice)."""

    def __init__(self, doc: dict) -> None:
        self.doc = doc
        self.raw: dict[str, str] = {}

    def rawtext(self, text: str) -> str:
        key = f"__RAW_{len(self.raw)}__"
        self.raw[key] = text
        return key

    def text(self, rng: random.Random) -> bytes:
        s = json.dumps(self.doc, ensure_ascii=rng.random() < 0.5)
        if self.raw:
            s = re.sub(r'"(__RAW_\d+__)"', lambda m: self.raw.get(m[1], m[0]), s)
        return s.encode("utf-8", "surrogatepass")


def _event(d: Doc, rng: random.Random) -> dict | None:
    evs = d.doc["traceEvents"]
    if not evs:
        return None
    e = evs[rng.randrange(len(evs))]
    return e if isinstance(e, dict) else None


def m_number_string(d: Doc, rng: random.Random) -> str:
    e = _event(d, rng)
    if e is None:
        return "none"
    args = e.get("args") if isinstance(e.get("args"), dict) else None
    field = rng.choice([*INT_FIELDS, *(ARG_INTS if args is not None else ())])
    v = rng.choice([0, 1, 7, 12, 100, 1234567, 2**31, 2**62, e.get(field, 5) if isinstance(e.get(field), int) else 42])
    text = rng.choice(spellings(v))
    (args if field in ARG_INTS and args is not None else e)[field] = text
    return f"number string {field}={text!r}"


def m_raw_number(d: Doc, rng: random.Random) -> str:
    e = _event(d, rng)
    if e is None:
        return "none"
    field = rng.choice(["ts", "dur", "ts", "dur", "pid", "tid", "args"])
    text = rng.choice(RAW_NUMBERS)
    if field == "args":
        e["args"] = dict(e["args"]) if isinstance(e.get("args"), dict) else {}
        field = rng.choice(ARG_INTS)
        e["args"][field] = d.rawtext(text)
    else:
        e[field] = d.rawtext(text)
    return f"number text {field}={text}"


def m_type_swap(d: Doc, rng: random.Random) -> str:
    e = _event(d, rng)
    if e is None:
        return "none"
    v = rng.choice(ODD_VALUES)
    if rng.random() < 0.4 and isinstance(e.get("args"), dict):
        field = rng.choice([*ARG_INTS, "name"])
        e["args"][field] = v
        return f"type swap args.{field}={str(v)[:20]}"
    field = rng.choice(FIELDS)
    e[field] = v
    return f"type swap {field}={str(v)[:20]}"


def m_duplicate_key(d: Doc, rng: random.Random) -> str:
    e = _event(d, rng)
    if e is None:
        return "none"
    inside = rng.random() < 0.3 and isinstance(e.get("args"), dict)
    target = e["args"] if inside else e
    field = rng.choice([*ARG_INTS, "name"] if inside else FIELDS)
    value = json.dumps(rng.choice([1, 2, "X", "kernel", None, 3.5]))
    target[d.rawtext("x")] = 0
    d.raw[f"__RAW_{len(d.raw) - 1}__"] = f'{json.dumps(field)}: {value}, "__dup"'
    return f"duplicate key {'args.' if inside else ''}{field}"


def m_strings(d: Doc, rng: random.Random) -> str:
    e = _event(d, rng)
    if e is None:
        return "none"
    field = rng.choice(["name", "cat", "ph", "pid", "tid", "args.name"])
    if rng.random() < 0.4:
        v = d.rawtext(rng.choice(RAW_STRINGS))
    else:
        v = rng.choice(ODD_STRINGS)
    if field == "args.name":
        e["args"] = dict(e["args"]) if isinstance(e.get("args"), dict) else {}
        e["args"]["name"] = v
    else:
        e[field] = v
    return f"string {field}={d.raw.get(v, v)[:24]!r}"


def m_args_shape(d: Doc, rng: random.Random) -> str:
    e = _event(d, rng)
    if e is None:
        return "none"
    depth = rng.choice([2, 30, 31, 32, 33, 40, 1100])
    choice = rng.randrange(4)
    if choice == 0:
        e["args"] = rng.choice([[], "x", 5, None, [{"correlation": 1}]])
    elif choice == 1:
        e["args"] = {
            **(e["args"] if isinstance(e.get("args"), dict) else {}),
            "deep": d.rawtext("[" * depth + "]" * depth),
        }
    elif choice == 2:
        e["extra"] = d.rawtext('{"a": ' * depth + "0" + "}" * depth)
    else:
        e["args"] = {**(e["args"] if isinstance(e.get("args"), dict) else {}), "list": [{"x": "}, {"}, {}, {"y": [{}]}]}
    return f"args shape {choice} depth {depth}"


def m_phase_category(d: Doc, rng: random.Random) -> str:
    e = _event(d, rng)
    if e is None:
        return "none"
    if rng.random() < 0.5:
        e["ph"] = rng.choice(["X", "x", "B", "E", "i", "I", "M", "s", "f", "t", "", "XX"])
        return f"phase {e['ph']!r}"
    e["cat"] = rng.choice(["kernel", "Kernel", "cpu_op", "cuda_runtime", "Runtime", "gpu_memcpy", "Trace", "foo", ""])
    return f"category {e['cat']!r}"


def m_remove(d: Doc, rng: random.Random) -> str:
    e = _event(d, rng)
    if e is None or not e:
        return "none"
    k = rng.choice(list(e))
    del e[k]
    return f"removed {k}"


def m_not_an_object(d: Doc, rng: random.Random) -> str:
    evs = d.doc["traceEvents"]
    if not evs:
        return "none"
    evs[rng.randrange(len(evs))] = rng.choice([5, "x", [], None, [{"ph": "X"}], 1.5])
    return "event not an object"


def m_metadata(d: Doc, rng: random.Random) -> str:
    key = rng.choice(["baseTimeNanoseconds", "deviceProperties", "distributedInfo"])
    v = rng.choice([*spellings(1700000000000000000)[:9], None, [], {"rank": " 1"}, [{"id": "0"}], 2**64])
    d.doc[key] = v
    return f"metadata {key}={str(v)[:24]}"


MUTATIONS = (
    m_number_string,
    m_number_string,
    m_raw_number,
    m_type_swap,
    m_duplicate_key,
    m_strings,
    m_args_shape,
    m_phase_category,
    m_remove,
    m_not_an_object,
    m_metadata,
)


def mutate_text(text: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One byte-level change, or a change of the text between events."""
    op = rng.randrange(6)
    k = rng.randrange(len(text) + 1)
    if op == 0:
        b = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), "byte flips"
    if op == 1:
        return text[:k] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82"]) + text[k:], "invalid UTF-8"
    if op == 2:
        return text[:k] + bytes([rng.choice([0, 1, 10, 31])]) + text[k:], "control character"
    if op == 3:
        return text[:k], "truncated"
    if op == 4:
        sep = rng.choice([b"},{", b"},\n{", b"}, \t\r\n{", b"}\n,{", b"} , {"])
        return text.replace(b"}, {", sep), f"separator {sep!r}"
    return b"\xef\xbb\xbf" + text, "BOM"


# -- corpus windows ----------------------------------------------------------------------------


def corpus_docs() -> list[tuple[str, dict]]:
    """Every Kineto trace of the corpus, decoded (name, document)."""
    out = []
    for p in sorted(CORPUS.glob("*/*")):
        if p.name.endswith((".json", ".json.gz")):
            with gzip.open(p, "rb") if p.name.endswith(".gz") else open(p, "rb") as f:
                out.append((f"{p.parent.name}/{p.name}", json.loads(f.read())))
    if not out:
        raise SystemExit(f"mutate_traces: no Kineto trace in {CORPUS}")
    return out


def mutant(docs: list[tuple[str, dict]], rng: random.Random) -> tuple[bytes, str, list[str]]:
    """(file bytes, suffix, what was done) of one mutant."""
    name, base = rng.choice(docs)
    evs = base["traceEvents"]
    size = rng.choice([20, 200, 2000, 4000])
    lo = rng.randrange(max(1, len(evs) - size))
    doc = {k: v for k, v in base.items() if k != "traceEvents"}
    doc["traceEvents"] = json.loads(json.dumps(evs[lo : lo + size]))  # a deep copy
    d = Doc(doc)
    done = [f"{name}[{lo}:{lo + size}]"]
    for _ in range(rng.randint(1, 6)):
        done.append(rng.choice(MUTATIONS)(d, rng))
    text = d.text(rng)
    if rng.random() < 0.15:
        text, what = mutate_text(text, rng)
        done.append(what)
    if rng.random() < 0.2:
        return gzip.compress(text, 1), ".json.gz", done
    return text, ".json", done


# -- decoding three ways -------------------------------------------------------------------------


def outcomes(path: str) -> dict:
    """The load of ``path`` by each decoder (a Trace, or hostgap's error text)."""
    import hostgap.readers.kineto as kineto
    import hostgap.readers.kineto.stream as kstream
    import hostgap.readers.text as text_mod
    from hostgap.errors import HostgapError
    from hostgap.readers import load_trace

    def load(jobs: int):
        try:
            return load_trace(path, jobs=jobs)
        except HostgapError as e:
            return f"hostgap error: {e.problem}"

    out = {}
    os.environ.pop("HOSTGAP_PURE_PYTHON", None)
    out["compiled"] = load(1)
    saved = kineto.PARALLEL_MIN_BYTES, kstream.CHUNK, text_mod.READ_PIECE, text_mod.OUT_PIECE
    kineto.PARALLEL_MIN_BYTES, kstream.CHUNK, text_mod.READ_PIECE, text_mod.OUT_PIECE = 0, 701, 4096, 4096
    try:
        out["compiled, 2 threads"] = load(2)
    finally:
        kineto.PARALLEL_MIN_BYTES, kstream.CHUNK, text_mod.READ_PIECE, text_mod.OUT_PIECE = saved
    os.environ["HOSTGAP_PURE_PYTHON"] = "1"
    try:
        out["pure-Python"] = load(1)
    finally:
        os.environ.pop("HOSTGAP_PURE_PYTHON", None)
    return out


def same(a, b) -> bool:
    import numpy as np

    from hostgap.events import COLUMNS

    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return (
        a.names == b.names
        and a.meta == b.meta
        and all(np.array_equal(getattr(a.events, c), getattr(b.events, c)) for c in COLUMNS)
    )


def run(n: int, seed: int, keep: str | None) -> int:
    from hostgap.readers.kineto import compiled as kineto_columns

    if kineto_columns._NATIVE is None:
        raise SystemExit("mutate_traces: the compiled decoder is not built (scripts/env.sh)")
    print(f"compiled decoder: {kineto_columns._NATIVE.__file__}", flush=True)
    docs = corpus_docs()
    rng = random.Random(seed)
    counts: Counter = Counter()
    kinds: Counter = Counter()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hostgap-mutants-") as d:
        for i in range(n):
            data, suffix, done = mutant(docs, rng)
            path = os.path.join(d, f"m{i}{suffix}")
            with open(path, "wb") as f:
                f.write(data)
            try:
                got = outcomes(path)
            except Exception as e:  # anything but hostgap's own error is a bug
                counts["other exception"] += 1
                print(f"mutant {i}: {type(e).__name__}: {str(e)[:200]} | {'; '.join(done)}", flush=True)
                continue
            ref = got["compiled"]
            counts["loaded" if not isinstance(ref, str) else "hostgap error"] += 1
            for other in ("pure-Python", "compiled, 2 threads"):
                if not same(ref, got[other]):
                    counts[f"differ: {other}"] += 1
                    kinds.update(x.split(" ")[0] for x in done[1:])
                    show = [x if isinstance(x, str) else f"{len(x.events)} events" for x in (ref, got[other])]
                    print(f"mutant {i} differs ({other}): {show[0][:80]} / {show[1][:80]} | {'; '.join(done)}")
                    if keep:
                        os.makedirs(keep, exist_ok=True)
                        shutil.copy(path, os.path.join(keep, f"m{seed}-{i}{suffix}"))
            os.unlink(path)
    differ = sum(v for k, v in counts.items() if k.startswith("differ")) + counts["other exception"]
    print(
        f"{n} mutants (seed {seed}, {time.perf_counter() - t0:.0f} s): loaded {counts['loaded']}, "
        f"hostgap error {counts['hostgap error']}, compiled vs pure-Python differ "
        f"{counts['differ: pure-Python']}, 1 vs 2 threads differ {counts['differ: compiled, 2 threads']}, "
        f"other exceptions {counts['other exception']}"
    )
    if kinds:
        print("mutations in the differing mutants:", dict(kinds.most_common()))
    return 1 if differ else 0


# -- the sanitizer build ---------------------------------------------------------------------------


def build_sanitized(tree: Path) -> dict:
    """Copy the package into ``tree`` with its compiled decoder built with AddressSanitizer and
    UndefinedBehaviorSanitizer; return the environment that runs Python on it (the sanitizer
    runtimes preloaded; a report aborts the process). Raises RuntimeError when gcc or the
    sanitizer runtimes are missing."""
    cc = shutil.which("gcc")
    if cc is None:
        raise RuntimeError("gcc not found: the sanitizer build needs it")
    libs = [
        subprocess.run([cc, f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
        for lib in ("libasan.so", "libubsan.so")
    ]
    if not all(os.path.isabs(x) for x in libs):
        raise RuntimeError("libasan/libubsan not installed")
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
    env = {
        **os.environ,
        "LD_PRELOAD": ":".join(libs),
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "PYTHONPATH": str(tree),
    }
    env.pop("HOSTGAP_PURE_PYTHON", None)
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="mutants (default 1000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="copy every differing mutant there")
    ap.add_argument("--sanitize", action="store_true", help="run on an ASan + UBSan build of the decoder")
    args = ap.parse_args()
    if not args.sanitize:
        return run(args.n, args.seed, args.keep)
    with tempfile.TemporaryDirectory(prefix="hostgap-sanitized-") as d:
        env = build_sanitized(Path(d))
        cmd = [sys.executable, __file__, "-n", str(args.n), "--seed", str(args.seed)]
        r = subprocess.run(
            [*cmd, *(["--keep", args.keep] if args.keep else [])], env=env, stderr=subprocess.PIPE, text=True
        )
        reports = len(re.findall(r"runtime error|ERROR: AddressSanitizer", r.stderr))
        print(f"sanitizer (ASan + UBSan) reports: {reports}; exit status {r.returncode}")
        if r.returncode or reports:
            print(r.stderr[-5000:], file=sys.stderr)
        return 1 if (r.returncode or reports) else 0


if __name__ == "__main__":
    sys.exit(main())
