"""The second look does not parse: a trace's decoded event table, its links and the documents
its analysis produced, kept on disk and read back by memory map (docs/input.md, "The cache").

Where: ``$HOSTGAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/hostgap``, else ``~/.cache/hostgap``;
``--no-cache`` (or ``HOSTGAP_NO_CACHE=1``) bypasses it. One entry per trace file, in a folder
named by a key over the file's identity (real path, device, inode, size, modification and
status-change times in ns), a fingerprint of its content (BLAKE2b over the size and eight 64 KiB
blocks spread over the file, first and last included) and hostgap's version, so a file changed
in place (which moves its status-change time, even when its size and modification time are put
back) or a new hostgap never meets an old entry. Inside: ``events/`` (one ``.npy`` per column,
the names and the trace's metadata), ``links/`` (the linker's arrays), and per analysis options
``o-<key>/`` (the documents of ``analyze``/``steps``/``report`` and the launch table's arrays).

Every file is listed in its folder's ``manifest.json`` with its size and CRC-32; a file is used
only when both match, so an entry that is truncated, bit-flipped, half-written or from another
format ends in a rebuild (with one note), never in a wrong number. Folders are written under a
temporary name and renamed into place: two processes filling one entry both get a correct
result, and one folder wins. The cache holds at most ``HOSTGAP_CACHE_MAX`` bytes (default 10G;
``0`` keeps nothing), evicting the least recently used entries; ``hostgap cache`` lists and
clears it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from io import BytesIO
from pathlib import Path

import numpy as np

from hostgap.errors import HostgapError
from hostgap.events import COLUMNS, DeviceInfo, EventTable, Trace, TraceMeta

try:  # ISA-L's CRC-32: the same values as zlib's, several times faster on an entry's arrays
    from isal.isal_zlib import crc32 as _crc32
except ImportError:
    from zlib import crc32 as _crc32

FORMAT = 1
"""The layout of an entry; bumped on any change (old entries are then never read)."""
DEFAULT_MAX_BYTES = 10 * 2**30
BLOCK = 64 * 1024
BLOCKS = 8
MANIFEST = "manifest.json"
USED = "used"

Note = Callable[[str], None]


def _quiet(_msg: str) -> None:
    return None


def cache_dir() -> Path:
    """Where the cache lives (module docstring)."""
    if os.environ.get("HOSTGAP_CACHE_DIR"):
        return Path(os.environ["HOSTGAP_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hostgap"


def max_bytes() -> int:
    """The size cap: ``HOSTGAP_CACHE_MAX``, a byte count with an optional K/M/G/T suffix (powers
    of 1024), default 10 GiB.

    >>> os.environ["HOSTGAP_CACHE_MAX"] = "2G"; max_bytes(), os.environ.pop("HOSTGAP_CACHE_MAX")[:0]
    (2147483648, '')
    """
    text = os.environ.get("HOSTGAP_CACHE_MAX", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    m = re.fullmatch(r"(\d+)\s*([kKmMgGtT]?)i?[bB]?", text)
    if not m:
        raise HostgapError("HOSTGAP_CACHE_MAX", f"{text!r} is not a byte count (e.g. 20G, 0 to keep nothing)")
    return int(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")


def enabled() -> bool:
    return os.environ.get("HOSTGAP_NO_CACHE", "") in ("", "0")


@dataclass(frozen=True)
class Identity:
    """What says a file is the same file with the same content (module docstring)."""

    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    fingerprint: str

    @staticmethod
    def of(path: str) -> Identity:
        real = os.path.realpath(path)
        st = os.stat(real)
        h = hashlib.blake2b(str(st.st_size).encode(), digest_size=16)
        with open(real, "rb") as f:
            for off in _offsets(st.st_size):
                f.seek(off)
                h.update(f.read(BLOCK))
        return Identity(real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, h.hexdigest())

    def key(self) -> str:
        text = json.dumps([FORMAT, code_identity(), *asdict(self).values()])
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


_CODE: list[str] = []


def code_identity() -> str:
    """hostgap's version and its installed code (every module's path, size and modification
    time): an entry made by other code is never read, also between two commits of a checkout.

    >>> code_identity() == code_identity()
    True
    """
    if not _CODE:
        from hostgap.version import __version__

        root = Path(__file__).resolve().parents[1]
        h = hashlib.blake2b(__version__.encode(), digest_size=16)
        for p in sorted(root.rglob("*")):
            if p.suffix in (".py", ".so", ".json") and p.is_file():
                st = p.stat()
                h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns};".encode())
        _CODE.append(h.hexdigest())
    return _CODE[0]


def _offsets(size: int) -> list[int]:
    """Where the fingerprint's blocks start: spread evenly, the first and the last included.

    >>> _offsets(100), _offsets(8 * 2**20)[:2], _offsets(8 * 2**20)[-1] == 8 * 2**20 - 65536
    ([0], [0, 1189010], True)
    """
    if size <= BLOCK:
        return [0]
    last = size - BLOCK
    return sorted({round(i * last / (BLOCKS - 1)) for i in range(BLOCKS)})


def options_key(options) -> str:
    """The folder name of one set of analysis options: its fields, and the content of the floor
    file it names (a changed floor file is other options)."""
    d = asdict(options)
    floor = d.get("floor_file")
    if floor and os.path.isfile(floor):
        d["floor_file_content"] = hashlib.blake2b(Path(floor).read_bytes(), digest_size=16).hexdigest()
    return "o-" + hashlib.blake2b(json.dumps(d, sort_keys=True).encode(), digest_size=12).hexdigest()


class Entry:
    """The cache entry of one trace file; every read checks what it reads (module docstring)."""

    def __init__(self, root: Path, identity: Identity, given_path: str, note: Note = _quiet):
        self.root, self.identity, self.given_path, self.note = root, identity, given_path, note
        self.dir = root / f"v{FORMAT}" / identity.key()
        self._damaged_said = False

    # -- reading ------------------------------------------------------------------------------

    def _files(self, group: str) -> dict[str, Path] | None:
        """The verified files of one folder (None when absent; the entry dropped when damaged)."""
        folder = self.dir / group
        if not folder.is_dir():
            return None
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
            if manifest.get("format") != FORMAT or manifest.get("identity") != asdict(self.identity):
                raise ValueError("written for another file or format")
            out = {}
            for name, (size, crc) in manifest["files"].items():
                p = folder / name
                if p.stat().st_size != size or _crc(p) != crc:
                    raise ValueError(f"{group}/{name} does not match its checksum")
                out[name] = p
        except (OSError, ValueError, KeyError, TypeError) as e:
            self._damaged(f"{e}")
            return None
        self._touch()
        return out

    def _damaged(self, why: str) -> None:
        if not self._damaged_said:
            self.note(f"cache entry of {self.given_path} unusable ({why}): rebuilt")
            self._damaged_said = True
        shutil.rmtree(self.dir, ignore_errors=True)

    def trace_cached(self) -> bool:
        """Whether the entry holds a decoded table (not yet verified: :meth:`trace` does that)."""
        return (self.dir / "events" / MANIFEST).is_file()

    def trace(self) -> Trace | None:
        """The decoded trace, its columns memory-mapped; None when not cached (or damaged)."""
        files = self._files("events")
        if files is None:
            return None
        try:
            cols = {c: np.load(files[f"{c}.npy"], mmap_mode="r", allow_pickle=False) for c in COLUMNS}
            names = tuple(json.loads(files["names.json"].read_bytes()))
            meta = _meta_from(json.loads(files["meta.json"].read_bytes()), self.given_path)
            events = EventTable(**cols)
            events.validate()
        except (OSError, ValueError, KeyError, TypeError) as e:
            self._damaged(f"events: {e}")
            return None
        return Trace(events, names, meta)

    def arrays(self, group: str) -> dict[str, np.ndarray] | None:
        files = self._files(group)
        if files is None:
            return None
        try:
            return {
                p.stem: np.load(p, mmap_mode="r", allow_pickle=False) for n, p in files.items() if n.endswith(".npy")
            }
        except (OSError, ValueError) as e:
            self._damaged(f"{group}: {e}")
            return None

    def document(self, group: str, name: str) -> dict | None:
        """A JSON document stored by :meth:`put_documents`, its ``trace`` key the path as given now."""
        files = self._files(group)
        if files is None or f"{name}.json" not in files:
            return None
        try:
            doc = json.loads(files[f"{name}.json"].read_bytes())
        except ValueError as e:
            self._damaged(f"{group}/{name}: {e}")
            return None
        return _with_path(doc, self.given_path)

    # -- writing ------------------------------------------------------------------------------

    def put_trace(self, trace: Trace) -> None:
        ev = trace.events
        files: dict[str, bytes | np.ndarray] = {f"{c}.npy": np.asarray(getattr(ev, c)) for c in COLUMNS}
        files["names.json"] = json.dumps(list(trace.names)).encode()
        files["meta.json"] = json.dumps(_meta_dict(trace.meta)).encode()
        self._put("events", files)

    def put_arrays(self, group: str, arrays: dict[str, np.ndarray], extra: dict | None = None) -> None:
        files: dict[str, bytes | np.ndarray] = {f"{k}.npy": np.asarray(v) for k, v in arrays.items()}
        if extra is not None:
            files["extra.json"] = json.dumps(extra).encode()
        self._put(group, files)

    def put_documents(self, group: str, docs: dict[str, dict], arrays: dict[str, np.ndarray] | None = None) -> None:
        files: dict[str, bytes | np.ndarray] = {
            f"{k}.json": json.dumps(_with_path(v, None)).encode() for k, v in docs.items()
        }
        files.update({f"{k}.npy": np.asarray(v) for k, v in (arrays or {}).items()})
        self._put(group, files)

    def _put(self, group: str, files: dict[str, bytes | np.ndarray]) -> None:
        """Write one folder under a temporary name, then rename it into place (a folder another
        process put there first wins); then keep the cache under its cap."""
        if (self.dir / group).is_dir():
            return
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{group}-", dir=self.dir))
            try:
                manifest = {}
                for name, content in files.items():
                    manifest[name] = list(_write(tmp / name, content))
                doc = {"format": FORMAT, "identity": asdict(self.identity), "files": manifest}
                (tmp / MANIFEST).write_text(json.dumps(doc))
                os.rename(tmp, self.dir / group)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)  # a full disk, or another process won: no entry
                return
            self._touch()
            evict(self.root, max_bytes(), keep=self.dir)
        except OSError:
            return  # a cache that cannot be written is a slower second look, not an error

    def _touch(self) -> None:
        try:
            (self.dir / USED).touch()
        except OSError:
            pass


def entry_for(path: str, note: Note = _quiet) -> Entry | None:
    """The entry of ``path`` when the cache is on and the file can be read (else None)."""
    if not enabled():
        return None
    try:
        identity = Identity.of(path)
    except OSError:
        return None
    return Entry(cache_dir(), identity, path, note)


# -- the whole cache -----------------------------------------------------------------------


@dataclass(frozen=True)
class Listed:
    """One entry as ``hostgap cache`` lists it."""

    key: str
    path: str
    size_bytes: int
    trace_bytes: int
    last_used: float
    parts: tuple[str, ...]


def entries(root: Path | None = None) -> list[Listed]:
    """Every entry of the cache, most recently used first."""
    root = root or cache_dir()
    out = []
    for d in sorted((root / f"v{FORMAT}").glob("*")) if (root / f"v{FORMAT}").is_dir() else []:
        if not d.is_dir():
            continue
        ident = _identity_of(d)
        used = d / USED
        out.append(
            Listed(
                d.name,
                ident.get("path", "?"),
                _size(d),
                int(ident.get("size", 0)),
                used.stat().st_mtime if used.exists() else d.stat().st_mtime,
                tuple(sorted(p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))),
            )
        )
    return sorted(out, key=lambda e: -e.last_used)


def clear(root: Path | None = None) -> tuple[int, int]:
    """Remove every entry (and folders of older formats); (entries, bytes) removed."""
    root = root or cache_dir()
    n = size = 0
    if root.is_dir():
        for d in root.glob("v*"):
            for e in d.glob("*"):
                size += _size(e)
                n += 1
            shutil.rmtree(d, ignore_errors=True)
    return n, size


def evict(root: Path, cap: int, keep: Path | None = None) -> list[str]:
    """Remove least recently used entries until the cache is under ``cap`` bytes (``keep``, the
    entry just written, goes last); the keys removed."""
    listed = entries(root)
    total = sum(e.size_bytes for e in listed)
    removed = []
    for e in sorted(listed, key=lambda e: (keep is not None and e.key == keep.name, e.last_used)):
        if total <= cap:
            break
        shutil.rmtree(root / f"v{FORMAT}" / e.key, ignore_errors=True)
        total -= e.size_bytes
        removed.append(e.key)
    return removed


# -- helpers -------------------------------------------------------------------------------


def _crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            crc = _crc32(chunk, crc)
    return crc


def _write(path: Path, content: bytes | np.ndarray) -> tuple[int, int]:
    """Write one file of an entry; its size and CRC-32, taken from the bytes as they are
    written (a C-ordered array's from its memory), never by reading the file back."""
    if not isinstance(content, np.ndarray):
        data = memoryview(content)
    elif content.flags.c_contiguous and not content.dtype.hasobject:
        # the .npy layout np.save writes: the version 1.0 header, then the array's bytes
        head = BytesIO()
        np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(content))
        body = memoryview(content.data).cast("B") if content.size else memoryview(b"")
        with open(path, "wb") as f:
            f.write(head.getvalue())
            f.write(body)
        return len(head.getvalue()) + body.nbytes, _crc32(body, _crc32(head.getvalue()))
    else:
        np.save(path, content, allow_pickle=False)
        return path.stat().st_size, _crc(path)
    with open(path, "wb") as f:
        f.write(data)
    return data.nbytes, _crc32(data)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _identity_of(entry_dir: Path) -> dict:
    for m in entry_dir.glob(f"*/{MANIFEST}"):
        try:
            return json.loads(m.read_text()).get("identity") or {}
        except (OSError, ValueError):
            continue
    return {}


def _with_path(doc, path: str | None):
    """A document's ``trace`` key (the path as the user gave it) blanked for storage, or set to
    ``path`` when read back."""
    if isinstance(doc, dict) and "trace" in doc:
        return {**doc, "trace": path}
    return doc


def _meta_dict(meta: TraceMeta) -> dict:
    d = {f.name: getattr(meta, f.name) for f in fields(meta)}
    d["devices"] = [asdict(x) for x in meta.devices]
    d["processes"] = [[k, v] for k, v in meta.processes.items()]
    d["path"] = None
    return d


def _meta_from(d: dict, path: str) -> TraceMeta:
    return TraceMeta(
        **{
            **d,
            "path": path,
            "devices": tuple(DeviceInfo(**x) for x in d["devices"]),
            "processes": {int(k): v for k, v in d["processes"]},
        }
    )


def note_for(progress) -> Note:
    """Where the cache's notes go: the progress callback, else one line on stderr."""
    return progress if progress is not None else _stderr


def _stderr(msg: str) -> None:
    import sys

    print(f"hostgap: note: {msg}", file=sys.stderr)
