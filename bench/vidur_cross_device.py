"""Score a per-op roofline fitted on vidur profiles of one GPU on profiles of another GPU or model.

Fetches nothing: pass the files. Fits on every ``--fit FILE`` (measured on ``--device``), never
on a ``--test FILE:DEVICE``, and prints per test file: GEMM MAPE, all-op MAPE, max error, rows,
then the GEMM error by token band (mean signed error in brackets: + means predicted too slow).
The four GEMMs share one efficiency set (as ``hostgap fit --vidur-mlp`` fits them);
``--per-op-gemm`` fits one per projection instead, for comparison.

    python bench/vidur_cross_device.py --device a100 \
        --fit ../shared/traces/vidur/a100_llama3-8b_mlp.csv --fit ../shared/traces/vidur/a100_llama2-7b_mlp.csv \
        --test /tmp/vidur/h100_phi-2_mlp.csv:h100 --test /tmp/vidur/a100_phi-2_mlp.csv:a100
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from hostgap.model import roofline, vidur
from hostgap.model.devices import find_device

BANDS = ((1, 64, "T<=64"), (65, 512, "64<T<=512"), (513, 1 << 30, "T>512"))


def _concat(samples):
    return roofline.OpSamples(
        *(
            np.concatenate([getattr(s, f) for s in samples])
            for f in ("key", "flops", "bytes", "kernels", "peak_flops", "bw_bytes_per_s", "time_ns", "group", "tokens")
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True, help="GPU the --fit files were measured on")
    ap.add_argument("--fit", action="append", required=True, help="vidur *_mlp.csv to fit on (repeatable)")
    ap.add_argument("--test", action="append", required=True, help="FILE:DEVICE to score (repeatable)")
    ap.add_argument("--per-op-gemm", action="store_true", help="one efficiency set per GEMM, not one for all four")
    a = ap.parse_args()
    dev = find_device(a.device)
    gemm_key = None if a.per_op_gemm else vidur.GEMM_FAMILY
    rl = roofline.fit(_concat([vidur.as_hostgap_ops(vidur.read_mlp(p, dev), gemm_key) for p in a.fit]), dev.name)
    gemm = list(vidur.GEMM_KEYS)
    print(
        f"fitted on {', '.join(Path(p).name for p in a.fit)} ({dev.name}); GEMMs "
        + ("per op" if a.per_op_gemm else "as one family")
    )
    print(
        f"{'file':24s} {'device':10s} {'GEMM MAPE %':>11s} {'all-op MAPE %':>13s} {'max err %':>9s} {'rows':>5s}  "
        + "  ".join(f"{b[2]:>16s}" for b in BANDS)
    )
    for spec in a.test:
        path, _, name = spec.rpartition(":")
        tdev = find_device(name)
        s = vidur.as_hostgap_ops(vidur.read_mlp(path, tdev), gemm_key)
        rel = (roofline.predict(rl, s) - s.time_ns) / s.time_ns
        g = np.isin(s.key, gemm)
        bands = []
        for lo, hi, _label in BANDS:
            m = g & (s.tokens >= lo) & (s.tokens <= hi)
            bands.append(f"{np.abs(rel[m]).mean() * 100:6.1f} ({rel[m].mean() * 100:+5.1f})" if m.any() else "-")
        print(
            f"{Path(path).name:24s} {tdev.name:10s} {np.abs(rel[g]).mean() * 100:11.1f} "
            f"{np.abs(rel).mean() * 100:13.1f} {np.abs(rel).max() * 100:9.1f} {len(s):5d}  "
            + "  ".join(f"{b:>16s}" for b in bands)
        )


if __name__ == "__main__":
    main()
