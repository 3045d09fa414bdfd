"""docs/attribution.md's examples, run as written and compared with the numbers it prints:
the synthetic fit (800 steps, seed 1) and its held-out table, step 20 under both host splits,
the Σp·c example and the refusal of too few steps. A number here that changes is a number the
document must change with."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.model import attribution as A
from hostgap.model.synth import synth_steps


def run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def documented(tmp_path_factory):
    """$ hostgap attribute synth run.parquet --steps 800 --seed 1
    $ hostgap attribute fit run.parquet -o model.json"""
    d = tmp_path_factory.mktemp("doc")
    run("attribute", "synth", d / "run.parquet", "--steps", "800", "--seed", "1")
    fitted = run("attribute", "fit", d / "run.parquet", "-o", d / "model.json", "--json")
    return d, fitted


def test_fit_says_how_many_steps_trained_and_were_held_out(documented):
    _, fitted = documented
    assert "trained on 576 steps, 224 held out" in " ".join(fitted.stderr.split())  # the console wraps


# the model table: class, Σp range, β ms, a1 µs/tok, a2 ns/kv, a3 ns/tok², a4 µs/req, a5 ns/(tok·kv)
MODEL_TABLE = [
    ("prefill", 516.0, 4.005, 5.895, 15.377, 2.3097, 118.335, 0.01880),
    ("prefill", None, 2.489, 21.986, 15.736, 4.0470, 145.311, 0.00374),
    ("decode", 63.5, 6.999, 0.000, 29.935, 0.0000, 60.282, 0.00000),
    ("decode", None, 5.094, 0.000, 29.983, 0.0000, 109.216, 0.00000),
]


def test_the_model_table(documented):
    d, _ = documented
    model = json.loads((d / "model.json").read_text())
    rows = []
    for name, cm in model["classes"].items():
        for s in cm["segments"]:
            rows.append(
                (
                    name,
                    s["sum_p_max"],
                    round(s["beta_ns"] / 1e6, 3),
                    round(s["a1_ns_per_token"] / 1e3, 3),
                    round(s["a2_ns_per_kv_token"], 3),
                    round(s["a3_ns_per_token2"], 4),
                    round(s["a4_ns_per_request"] / 1e3, 3),
                    round(s["a5_ns_per_token_kv_token"], 5),
                )
            )
    assert rows == MODEL_TABLE
    # the decode model fits β, the per-request constant and a2 only
    assert model["classes"]["decode"]["terms"] == ["beta_ns", "a4_ns_per_request", "a2_ns_per_kv_token"]


# the held-out table: class, steps, R², p50, p90, p99 (%), base R², base p50, p90, p99 (%),
# gain p90, gain p99, host fraction (%)
HELD_OUT_TABLE = [
    ("prefill", 85, 0.9997, 0.5, 1.4, 3.9, 0.920, 16.4, 40.0, 73.2, 28.45, 18.81, 12.1),
    ("decode", 139, 0.9998, 0.5, 1.2, 2.0, 0.985, 6.0, 13.0, 20.2, 10.59, 9.93, 36.0),
    ("all", 224, 0.9998, 0.5, 1.3, 2.2, 0.954, 8.6, 24.8, 71.6, 18.37, 33.12, 32.8),
]


def test_the_held_out_table(documented):
    _, fitted = documented
    pct = lambda v: round(100 * v, 1)  # noqa: E731
    rows = [
        (
            g["class"],
            g["n_steps"],
            round(g["r2"], 4),
            pct(g["rel_err_p50"]),
            pct(g["rel_err_p90"]),
            pct(g["rel_err_p99"]),
            round(g["baseline_r2"], 3),
            pct(g["baseline_rel_err_p50"]),
            pct(g["baseline_rel_err_p90"]),
            pct(g["baseline_rel_err_p99"]),
            round(g["improvement_p90"], 2),
            round(g["improvement_p99"], 2),
            pct(g["host_fraction_median"]),
        )
        for g in json.loads(fitted.stdout)["held_out"]["groups"]
    ]
    assert rows == HELD_OUT_TABLE
    assert {g["source"] for g in json.loads(fitted.stdout)["held_out"]["groups"]} == {"synth"}


# step 20: request, phase, q, s, share ms, share %, by tokens %, alone ms; then device ms and
# host ms under --split fraction and under --split model
STEP_20 = [
    ("r776", "prefill", 147, 147, 3.882, 4.7, 5.1, 5.042, (3.728, 0.154), (3.335, 0.547)),
    ("r777", "prefill", 1531, 2356, 43.758, 53.0, 52.8, 45.832, (42.017, 1.741), (43.205, 0.552)),
    ("r778", "prefill", 34, 5347, 1.397, 1.7, 1.2, 4.412, (1.342, 0.056), (0.875, 0.522)),
    ("r779", "prefill", 1184, 3244, 32.330, 39.2, 40.9, 34.405, (31.044, 1.286), (31.779, 0.552)),
    ("r780", "decode", 1, 393, 0.588, 0.7, 0.0, 7.071, (0.565, 0.023), (0.109, 0.479)),
    ("r781", "decode", 1, 170, 0.585, 0.7, 0.0, 7.064, (0.562, 0.023), (0.106, 0.479)),
]


@pytest.mark.parametrize("split", ["fraction", "model"])
def test_explain_step_20(documented, split):
    d, _ = documented
    out = json.loads(
        run(
            "attribute", "explain", d / "model.json", d / "run.parquet", "--step", 20, "--split", split, "--json"
        ).stdout
    )
    assert (out["class"], out["requests"]) == ("prefill", 6)
    assert round(out["predicted_ns"] / 1e6, 3) == 82.540 and round(out["measured_ns"] / 1e6, 3) == 82.416
    assert round(100 * out["host_fraction"], 1) == 4.0
    ms = lambda v: round(v / 1e6, 3)  # noqa: E731
    pct = lambda v: round(100 * v, 1)  # noqa: E731
    rows = [
        (
            r["request"],
            r["phase"],
            r["q"],
            r["s"],
            ms(r["share_ns"]),
            pct(r["share_fraction"]),
            pct(r["token_fraction"]),
            ms(r["alone_ns"]),
            (ms(r["device_ns"]), ms(r["host_ns"])),
        )
        for r in out["requests_shares"]
    ]
    assert rows == [(*row[:8], row[8] if split == "fraction" else row[9]) for row in STEP_20]
    # "by tokens": a decode request's 0.0 % is 1 token of the step's 2,898
    assert sum(r["q"] for r in out["requests_shares"]) == 2898


def test_pc_term_example():
    """The Σp·c paragraph: a5 = 0.5 ns per token·KV token in the truth, prefill-only steps,
    0.5 % noise; held-out p90 0.70 % with a5 and 2.1 % without, p99 1.1 % vs 7.6 %."""
    strong = tuple((b, (*c[:5], 0.5)) for b, c in synth_steps.__kwdefaults__["prefill_truth"])
    data = synth_steps(900, seed=8, noise=0.005, decode_fraction=0.0, prefill_truth=strong)
    test = A.split_mask(data.steps, 0.3)
    train, held = data.steps.subset(~test), data.steps.subset(test)
    (with_pc,) = A.evaluate(A.fit(train), held).groups
    (without,) = A.evaluate(A.fit(train, use_pc=False), held).groups
    pct = lambda v: round(100 * v, 2)  # noqa: E731
    assert (pct(with_pc.rel_err[1]), pct(with_pc.rel_err[2])) == (0.70, 1.08)
    assert (pct(without.rel_err[1]), pct(without.rel_err[2])) == (2.10, 7.55)


def test_the_documented_refusal_of_too_few_steps():
    # 30 steps at 90 % decode: the prefill class has too few for its six terms (3 × 6 = 18)
    data = synth_steps(30, seed=1, decode_fraction=0.9)
    assert int(data.steps.is_prefill.sum()) == 5
    with pytest.raises(HostgapError) as e:
        A.fit(data.steps)
    assert e.value.problem == (
        "5 prefill step(s) are too few to fit the prefill model (need >= 18); collect more steps, "
        "or fit the other class only (--classes decode)"
    )
