"""``hostgap report`` on a stored watch: the "Inputs and their verdicts" table has its row (step
period, host share with its basis and interval, batch), as ``hostgap show`` gives them."""

from __future__ import annotations

import re

from hostgap.report.html import render
from hostgap.report.watch_section import watch_sections


def _doc(share: float | None) -> dict:
    row = {"t_rel_s": 0.0, "interval_s": 5.0, "host_share": share, "host_share_low": None, "host_share_high": None}
    return {
        "run_id": "20261207-watch-vllm-abc",
        "kind": "watch",
        "engine": "vllm",
        "server_url": "http://127.0.0.1:8000",
        "watch": {
            "intervals": [{**row, "seqs_per_step": 4.0}],
            "summary": {
                "by_status": {"ok": 1},
                "steps_per_s": 62.5,
                "tokens_per_step": 4.0,
                "host_share_basis": "model estimate",
                "host_share": share,
                "host_share_low": None if share is None else share - 0.125,
                "host_share_high": None if share is None else share + 0.125,
                "step_period_s": 0.016,
                "seqs_per_step": 4.0,
            },
        },
    }


def _row(page: str) -> str:
    table = page.split("<figure id='fig-summary'>")[1].split("</table>")[0]
    (row,) = re.findall(r"<tr data-input='watch-0'>.*?</tr>", table)
    return row


def test_a_stored_watch_gets_its_row_in_the_inputs_table():
    page, data = render([], "t", extra=watch_sections([("w", _doc(0.375))]))
    row = _row(page)
    # step period 16 ms; host share 0.375 (37.5 %); host-exposed per step 0.375 × 16 ms = 6 ms
    assert "<td data-key='wall_ns' data-value='16000000.0'>16.000 ms</td>" in row
    assert "<td data-key='host_fraction' data-value='0.375'>37.5%</td>" in row
    assert "<td data-key='host_exposed_ns' data-value='6000000.0'>6.000 ms</td>" in row
    assert "watch, model estimate, share 0.38 [0.25-0.50], batch 4.0" in row
    assert ">watched<" in row and "no verdict" in row
    assert data["watch_runs"][0]["summary"]["host_share"] == 0.375


def test_a_watch_without_an_estimate_shows_none_not_zero():
    row = _row(render([], "t", extra=watch_sections([("w", _doc(None))]))[0])
    assert "<td data-key='host_fraction' data-value=''>—</td>" in row
    assert "share not estimated" in row


def test_report_on_a_stored_fleet_view_draws_one_line_per_instance(tmp_path):
    import json

    from click.testing import CliRunner

    from hostgap.cli import cli
    from test_fleet_view import session

    s = session()
    list(s)
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(s.document(1)))
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(path), "-o", str(out), "--json", "-q"])
    assert res.exit_code == 0, res.output
    (entry,) = json.loads(res.stdout)["fleet_watches"]
    assert [i["instance"] for i in entry["instances"]] == ["s1", "i1", "i2", "i3"]
    page = out.read_text()
    section = page.split("<section id='fleet-0'>")[1].split("</section>")[0]
    assert section.count("<tr><td class='name'>") == 4
    assert "0.50 [0.38–0.62]" in section and "cal-a" in section and "0 of 1" in section
    # each instance also has its row in the inputs table: i1's window share 0.5, step period 1/64 s
    table = page.split("<figure id='fig-summary'>")[1].split("</table>")[0]
    rows = re.findall(r"<tr data-input='watch-\d+'>.*?</tr>", table)
    assert len(rows) == 4
    (i1,) = [r for r in rows if ">i1 (" in r]
    assert "<td data-key='host_fraction' data-value='0.5'>50.0%</td>" in i1
    assert "<td data-key='wall_ns' data-value='15625000.0'>15.625 ms</td>" in i1
