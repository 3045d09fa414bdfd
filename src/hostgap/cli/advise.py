"""`hostgap advise`: the levers of a trace, rank set or run, ranked by predicted gain
(:func:`hostgap.advise`, docs/advise.md)."""

from __future__ import annotations

import click

from hostgap import api


def register(cli: click.Group) -> None:
    """Add this module's command to the top-level group."""

    @cli.command("advise")
    @click.argument("inputs", nargs=-1, required=True, type=str)
    @click.option("--preset", default=None, help="The model's architecture where the input does not name it.")
    @click.option("--gpu", default=None, help="Predict for this GPU (a name or alias of the device table).")
    @click.option("--no-cache", is_flag=True, help="Analyse traces again even where a cached analysis exists.")
    @click.option("--json", "as_json", is_flag=True, help="JSON on stdout (schema: docs/advise.md).")
    @click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout: one row per lever.")
    def advise_cmd(inputs, preset, gpu, no_cache, as_json, as_csv):
        """Rank the levers (graphs, async, cpu, batch, fp8, tp, spec, fusion, megakernel) of each
        INPUT by predicted gain: a trace (Kineto or nsys), a rank directory, a run directory,
        results.json or run id of a measured, attached or watched run.

        \b
        Examples:
          hostgap advise vllm_decode.json.gz
          hostgap advise runs/<run_id> --preset llama-3.2-1b --json
          hostgap advise trace.json.gz --preset llama-3.1-8b --gpu h200 --csv
        """
        result = api.advise(list(inputs), preset=preset, gpu=gpu, cache=not no_cache)
        if as_json:
            click.echo(result.to_json())
        elif as_csv:
            result.to_csv()
        else:
            result.print()
