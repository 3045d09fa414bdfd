"""The ``hostgap`` command line: thin wrappers over the library.

Each pipeline stage registers its verbs from its own module (``analyze``, ``measure``,
``models``, ``attribute``, ``harvest``, ``report``), imported when one of its verbs is first looked
up (:data:`COMMANDS`): ``hostgap analyze`` does not import the capture and model commands.
Listing the commands (``--help``) imports them all. Data goes to stdout, logs and progress to
stderr; a user error is one line naming the input, exit status 2.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, cast

import click

from hostgap.errors import HostgapError
from hostgap.version import __version__

COMMANDS = {
    "analyze": "analyze",
    "steps": "analyze",
    "kernels": "analyze",
    "trim": "analyze",
    "measure": "measure",
    "presets": "measure",
    "floor": "measure",
    "runs": "runs",
    "show": "runs",
    "sweep": "measure",
    "account": "models",
    "fit": "models",
    "predict": "models",
    "regimes": "models",
    "attribute": "attribute",
    "harvest": "harvest",
    "report": "report",
    "compare": "report",
    "overlay": "report",
    "attach": "attach",
    "watch": "watch",
    "rules": "fleet",
    "cache": "cache",
    "advise": "advise",
}
"""Each top-level command and the module (``hostgap.cli.<module>``) whose ``register`` adds it."""
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


class _Commands(dict):
    """A group's commands, registered module by module on first use: looking one up imports
    its module (an unknown name imports them all, so click's error sees every command);
    listing them imports every module."""

    def __init__(self, group: click.Group):
        super().__init__()
        self._group = group
        self._loaded: set[str] = set()

    def _load(self, *modules: str) -> None:
        for module in modules:
            if module not in self._loaded:
                self._loaded.add(module)
                importlib.import_module(f"hostgap.cli.{module}").register(self._group)
                for command in dict.values(self):
                    _add_quiet(command)

    def _load_for(self, name) -> None:
        self._load(*((COMMANDS[name],) if name in COMMANDS else COMMAND_MODULES))

    def get(self, name, default=None):
        self._load_for(name)
        return super().get(name, default)

    def __getitem__(self, name):
        self._load_for(name)
        return super().__getitem__(name)

    def __contains__(self, name) -> bool:
        self._load_for(name)
        return super().__contains__(name)

    def _all(self) -> None:
        self._load(*COMMAND_MODULES)

    def __iter__(self):
        self._all()
        return super().__iter__()

    def __len__(self) -> int:
        self._all()
        return super().__len__()

    def keys(self):
        self._all()
        return super().keys()

    def values(self):
        self._all()
        return super().values()

    def items(self):
        self._all()
        return super().items()


class _Group(click.Group):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except HostgapError as e:
            click.echo(f"hostgap: error: {e}", err=True)
            status = getattr(e, "exit_status", 2)  # 2: bad input; 3: the engine failed
            if status == 3:
                _exit_now(status)
            _end_engine_leftovers()
            ctx.exit(status)
        except KeyboardInterrupt:
            click.echo("hostgap: interrupted", err=True)
            _exit_now(130)
            ctx.exit(130)
        except BrokenPipeError:  # `hostgap ... | head`
            sys.stderr.close()
            ctx.exit(0)


def _end_engine_leftovers() -> None:
    """With the vLLM engine loaded, end what a failed engine left behind (vllm_watch)."""
    if "hostgap.capture.engines.vllm.watchdog" in sys.modules:
        sys.modules["hostgap.capture.engines.vllm.watchdog"].end_leftovers_if_engine_loaded()


def _exit_now(status: int) -> None:
    """With the vLLM engine loaded, skip the interpreter's slow teardown (vllm_watch)."""
    if "hostgap.capture.engines.vllm.watchdog" in sys.modules:
        sys.modules["hostgap.capture.engines.vllm.watchdog"].exit_now_if_engine_loaded(status)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hostgap")
@click.option(
    "--max-trace-bytes",
    metavar="SIZE",
    default=None,
    help="Largest trace text to load, e.g. 64G (default 16G; docs/input.md).",
)
def cli(max_trace_bytes: str | None = None) -> None:
    """hostgap: where every millisecond of an LLM decode step goes.

    \b
    Examples:
      hostgap measure                      # small default workload on this machine
      hostgap analyze trace.json.gz        # GPU timeline of a profiler trace
      hostgap steps trace.json.gz --csv    # one row per engine step
    """
    if max_trace_bytes is not None:  # read by hostgap.readers.text.max_trace_bytes
        os.environ["HOSTGAP_MAX_TRACE_BYTES"] = max_trace_bytes


def _add_quiet(command: click.Command) -> None:
    """Give every command a ``-q/--quiet`` flag. Commands that take one handle it themselves;
    for the others it silences their notes and progress on stderr (errors still print)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_quiet(sub)
        return
    if any(p.name == "quiet" for p in command.params):
        return
    command.params.append(click.Option(["--quiet", "-q"], is_flag=True, help="No notes or progress on stderr."))
    # every hostgap command is made by click's decorator, which gives it its function
    callback = cast(Callable[..., Any], command.callback)

    def quiet_callback(*args, quiet=False, **kwargs):
        if not quiet:
            return callback(*args, **kwargs)
        saved = sys.stderr
        with open(os.devnull, "w") as devnull:
            sys.stderr = devnull
            try:
                return callback(*args, **kwargs)
            finally:
                sys.stderr = saved

    command.callback = functools.update_wrapper(quiet_callback, callback)


def main() -> None:
    no_huge_pages()
    cli(prog_name="hostgap")


def no_huge_pages() -> None:
    """Ask numpy, before it is first imported, not to request transparent huge pages for its
    large arrays (its ``NUMPY_MADVISE_HUGEPAGE`` setting; a value the user set is kept).

    Where the kernel compacts memory to find huge pages when a program asks for them (THP defrag
    ``madvise``, the default of many distributions), each large array's first touch stalls in
    the kernel: on a 0.5 GB trace ``analyze`` spent 1.7-2.5 s of system CPU against 0.7 s
    without, with the same user time and peak memory (bench/results/ingest-compiled-decoder.md)."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
