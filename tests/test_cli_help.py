"""Every command's --help: it runs, it has an example, and every option it shows has help text.

The walk goes over the live click tree (``hostgap.cli.cli``), so a command or option added
later is checked without editing this file.
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from hostgap.cli import cli


def _commands(group: click.Group, prefix=()):
    for name, cmd in sorted(group.commands.items()):
        path = (*prefix, name)
        yield path, cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, path)


COMMANDS = list(_commands(cli))


def _visible_options(cmd: click.Command):
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


def test_the_walk_finds_the_commands():
    names = {" ".join(p) for p, _ in COMMANDS}
    # a walk that found nothing would make the checks below pass vacuously
    assert {"measure", "report", "compare", "kernels", "trim", "floor", "harvest", "runs"} <= names
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=" ".join)
def test_every_option_has_help_text(path):
    cmd = dict(COMMANDS)[path]
    missing = [p.opts[0] for p in _visible_options(cmd) if not (p.help or "").strip()]
    assert not missing, f"hostgap {' '.join(path)}: options without help text: {', '.join(missing)}"
    res = CliRunner().invoke(cli, [*path, "--help"])
    assert res.exit_code == 0, res.output
    # each visible option appears in the rendered help with its text
    for p in _visible_options(cmd):
        assert p.opts[0] in res.output
        first_word = p.help.split()[0]
        assert first_word in res.output, f"{p.opts[0]}: help text not shown"


@pytest.mark.parametrize("path", [p for p, c in COMMANDS if not isinstance(c, click.Group)], ids=" ".join)
def test_every_command_help_has_an_example(path):
    res = CliRunner().invoke(cli, [*path, "--help"])
    assert res.exit_code == 0
    assert "Example" in res.output, f"hostgap {' '.join(path)} --help has no example"


def test_output_is_spelled_the_same_everywhere():
    """A file a command writes is named with -o/--output; former spellings still parse but are
    hidden from help."""
    for path, cmd in COMMANDS:
        for p in cmd.params:
            if isinstance(p, click.Option) and "-o" in p.opts:
                assert "--output" in p.opts, f"hostgap {' '.join(path)}: -o is not --output ({p.opts})"
            if isinstance(p, click.Option) and "--out" in p.opts and not p.hidden:
                pytest.fail(f"hostgap {' '.join(path)}: visible --out (use -o/--output)")


def test_a_hidden_former_spelling_still_works(tmp_path):
    """harvest --out (the old name) writes where it says, like -o/--output."""
    from hostgap.cli.harvest import harvest

    seen = {}

    def fake(traces, path, say):
        seen["path"] = path
        return {"rows": 0, "kinds": {}, "steps": str(path)}

    import hostgap.capture.engines.harvest_live as hv

    orig = hv.harvest_traces
    hv.harvest_traces = fake
    try:
        for args in (
            ["--out", str(tmp_path / "a.parquet")],
            ["-o", str(tmp_path / "b.parquet")],
            ["--output", str(tmp_path / "c.parquet")],
        ):
            res = CliRunner().invoke(harvest, ["trace.json", *args])
            assert res.exit_code == 0, res.output
            assert seen["path"].name == args[1].rsplit("/", 1)[1]
    finally:
        hv.harvest_traces = orig
    assert "--out " not in CliRunner().invoke(harvest, ["--help"]).output


def test_kernels_prints_a_table_unless_csv_or_json_is_asked(tmp_path):
    from test_report_fixtures import decode_events, write_trace

    trace = write_trace(tmp_path / "t.json", decode_events(n_steps=2, kernels=3))
    table = CliRunner().invoke(cli, ["kernels", trace, "-q"])
    assert table.exit_code == 0, table.output
    assert "┃ step" in table.output and "launch_api," not in table.output
    # 2 steps x 3 launches, one table row each
    assert table.output.count("cudaLaunchKernel") == 6
    csv_out = CliRunner().invoke(cli, ["kernels", trace, "--csv", "-q"]).output.splitlines()
    assert csv_out[0].startswith("step,launch_api,") and len(csv_out) == 1 + 6
    import json

    assert len(json.loads(CliRunner().invoke(cli, ["kernels", trace, "--json", "-q"]).output)) == 6


def test_each_command_is_found_in_the_module_named_for_it():
    """The lazy group imports ``COMMANDS[name]`` to find ``name``: every module's ``register``
    must add exactly the commands the table names for it, or a verb would be missing."""
    import importlib

    from hostgap.cli import COMMAND_MODULES, COMMANDS

    for module in COMMAND_MODULES:
        group = click.Group()
        importlib.import_module(f"hostgap.cli.{module}").register(group)
        assert set(dict.keys(group.commands)) == {c for c, m in COMMANDS.items() if m == module}, module


def test_a_command_imports_only_its_module():
    import subprocess
    import sys

    code = (
        "import sys; from hostgap.cli import cli; cli.commands.get('steps'); "
        "print(sorted(m for m in sys.modules if m.startswith('hostgap.cli.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['hostgap.cli.analyze', 'hostgap.cli.output']"  # output: helpers, no command
