"""Markdown summary of a validation sweep: one row per cell, eager vs graph, paper references.

    python bench/gpu/summarise.py bench/results/h200/runs.json bench/results/h200/floor-cuda.json

Reads the summary rows ``hostgap runs --json`` wrote and the floor file; prints markdown.
The paper's reference cells are vLLM V1 eager on an H100 (METHOD.md §6); hostgap's cells are
transformers in process on this machine, so they show the same quantities, not the same numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PAPER = {
    ("llama-3.1-8b", 1): "paper (H100, vLLM eager, b1, ctx 2048): wall 12.19, GPU 6.41, residual 5.78 ms (47 %)",
    ("llama-3.2-1b", 1): "paper: residual 5.56 ms",
    ("llama-3.2-3b", 1): "paper: residual 9.83 ms",
    ("llama-3.1-8b", 64): "paper: residual 0.59 ms at batch 64 (GPU-bound)",
}


def ms(ns):
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def verdict(row: dict) -> str:
    """The verdict cell; an invalid measurement shows why instead of a verdict."""
    if row.get("valid") == 0:
        return "invalid: " + (row.get("invalid_reasons") or "checks failed").split("\n")[0]
    return f"{row['verdict']}" + (" (machine busy)" if row.get("contended") else "")


def main(runs_path: str, floor_path: str | None = None) -> None:
    rows = json.loads(Path(runs_path).read_text())
    rows.sort(key=lambda r: (r["preset"] or "", r["batch"], r["mode"]))
    print("| preset | mode | batch | context | wall ms | device ms | host ms | host % | verdict |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        hf = r["host_fraction"]
        print(
            f"| {r['preset']} | {r['mode']} | {r['batch']} | {r['prompt_len']} | {ms(r['t_step_ns'])} | "
            f"{ms(r['g_step_ns'])} | {ms(r['h_step_ns'])} | {'-' if hf is None else f'{hf * 100:.1f}'} | "
            f"{verdict(r)} |"
        )
    print()
    by = {(r["preset"], r["batch"], r["prompt_len"], r["mode"]): r for r in rows}
    for (preset, batch, ctx, mode), r in sorted(by.items()):
        if mode != "eager" or (preset, batch, ctx, "graph") not in by:
            continue
        g = by[(preset, batch, ctx, "graph")]
        if r["t_step_ns"] and g["t_step_ns"]:
            print(
                f"- {preset} b{batch}: CUDA graph step {ms(g['t_step_ns'])} ms vs eager {ms(r['t_step_ns'])} ms "
                f"({r['t_step_ns'] / g['t_step_ns']:.2f}x)"
            )
    for (preset, batch), text in PAPER.items():
        if any(r["preset"] == preset and r["batch"] == batch for r in rows):
            print(f"- {preset} b{batch}: {text}")
    if floor_path and Path(floor_path).is_file():
        f = json.loads(Path(floor_path).read_text())
        print(
            f"- launch floor ({f['device']}, {f['device_name']}): mean {f['mean_ns'] / 1e3:.3f} µs, "
            f"p50 {f['p50_ns'] / 1e3:.3f}, p95 {f['p95_ns'] / 1e3:.3f} ({f['samples']} samples); "
            "paper H200 4.503 µs (p50 4.452, p95 4.909)"
        )


if __name__ == "__main__":
    main(*sys.argv[1:3])
