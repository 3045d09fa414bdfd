"""``hostgap rules``: Prometheus recording rules for a fleet. Library: :func:`hostgap.rules`."""

from __future__ import annotations

import click

from hostgap import api


def register(cli: click.Group) -> None:
    @cli.command("rules")
    @click.option(
        "--calibration",
        "calibrations",
        multiple=True,
        metavar="RUN",
        help="An attach run (id, directory or file); repeat. Runs of one (engine, model, hardware) class are "
        "fitted together [default: every attach run in --db].",
    )
    @click.option("--db", metavar="PATH", help="Runs database [$HOSTGAP_DB or the default].")
    @click.option("--window", default="1m", show_default=True, help="Rate window (≥ 4 scrape intervals).")
    @click.option(
        "--hardware-label",
        metavar="LABEL",
        help="A label your scrape configuration sets naming each server's hardware (classes that differ "
        "only in hardware need it).",
    )
    @click.option("--no-sglang", is_flag=True, help="Leave out the SGLang device-timer group.")
    @click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the rule file to FILE.")
    @click.option("--json", "as_json", is_flag=True, help="Print the classes and rules as JSON.")
    def rules_cmd(calibrations, db, window, hardware_label, no_sglang, output, as_json):
        """Write Prometheus recording rules that compute, for every instance of a calibrated class
        (engine, model, hardware), the host-exposed share watch computes (hostgap:host_exposed_share,
        _low, _high), the step period and the decode batch, from the engines' own series. A server
        of a class without a calibration gets no series.

        \b
        Examples:
          hostgap rules --calibration 20261203-0112 -o hostgap-fleet.yml
          hostgap rules --db runs.sqlite --hardware-label gpu -o hostgap-fleet.yml
          promtool check rules hostgap-fleet.yml
        """
        result = api.rules(calibrations, db=db, window=window, hardware_label=hardware_label, sglang=not no_sglang)
        if output:
            result.write(output)
            for c in result.to_dict()["classes"]:
                click.echo(f"rules: {c['engine']} {c['model']}: calibration {c['calibration']}", err=True)
        if as_json:
            click.echo(result.to_json())
        elif not output:
            click.echo(result.yaml, nl=False)
