"""The ``hostgap`` command line: thin wrappers over the library.

Each pipeline stage registers its verbs from its own module (``analyze``, ``measure``,
``models``, ``attribute``, ``vllm``, ``report``). Data goes to stdout, logs and progress to
stderr; a user error is one line naming the input, exit status 2.
"""

from __future__ import annotations

import importlib
import sys

import click

from hostgap import __version__
from hostgap.errors import HostgapError

COMMAND_MODULES = ("analyze", "measure", "models", "attribute", "vllm", "report")


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except HostgapError as e:
            click.echo(f"hostgap: error: {e}", err=True)
            ctx.exit(2)
        except BrokenPipeError:  # `hostgap ... | head`
            sys.stderr.close()
            ctx.exit(0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hostgap")
def cli() -> None:
    """hostgap: where every millisecond of an LLM decode step goes.

    \b
    Examples:
      hostgap measure                      # small default workload on this machine
      hostgap analyze trace.json.gz        # GPU timeline of a profiler trace
      hostgap steps trace.json.gz --csv    # one row per engine step
    """


for _name in COMMAND_MODULES:
    _mod = importlib.import_module(f"hostgap.cli.{_name}")
    _mod.register(cli)


def main() -> None:
    cli(prog_name="hostgap")
