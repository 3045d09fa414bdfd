"""`hostgap cache`: the analysis cache listed, and cleared (docs/input.md, "The cache";
:func:`hostgap.cache`)."""

from __future__ import annotations

import click

from hostgap import api


def register(cli: click.Group) -> None:
    @cli.command("cache")
    @click.option("--clear", is_flag=True, help="Remove every entry.")
    @click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
    def cache_cmd(clear, as_json):
        """List the analysis cache (where it is, each trace's entry with its size and last use), or
        clear it. A later command on a cached trace reads its decoded table and documents instead
        of parsing it again; --no-cache on a command, or HOSTGAP_NO_CACHE=1, bypasses it.

        \b
        Examples:
          hostgap cache
          hostgap cache --clear
          HOSTGAP_CACHE_MAX=20G hostgap analyze big.json.gz
        """
        result = api.cache(clear=clear)
        if as_json:
            click.echo(result.to_json())
        else:
            result.print()
