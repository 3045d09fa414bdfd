"""Conventions every command follows: --quiet, an example in its help, one-line errors."""

import click
import pytest
from click.testing import CliRunner

from hostgap.cli import cli


def leaf_commands(group=cli, prefix=()):
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from leaf_commands(cmd, prefix + (name,))
        else:
            yield prefix + (name,), cmd


COMMANDS = list(leaf_commands())


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_has_quiet_and_an_example(path, cmd):
    assert any(p.name == "quiet" for p in cmd.params), f"{' '.join(path)} has no --quiet"
    help_text = CliRunner().invoke(cli, [*path, "--help"]).output
    assert "hostgap" in help_text.split("Options:")[0].lower(), f"{' '.join(path)} help has no example"


def test_quiet_silences_notes_but_not_errors():
    r = CliRunner().invoke(cli, ["predict", "llama-3.2-1b", "-q"])
    assert r.exit_code == 0 and "note:" not in r.stderr
    r = CliRunner().invoke(cli, ["predict", "no-such-preset", "-q"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "no-such-preset" in r.stderr
