"""The latency model in the Python API: :func:`predict` (``hostgap predict``) and the
:class:`Prediction` it returns."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import IO, TYPE_CHECKING

from hostgap.api._results import Result, arrow_table

if TYPE_CHECKING:
    import pyarrow as pa

    from hostgap.model.prediction import CellPrediction


class Prediction(Result):
    """One decode step predicted (``hostgap predict``): ``to_dict()`` / ``to_json()`` are
    ``predict --json``, ``print()`` its table. ``prediction`` holds the step's device,
    collective and host time (ns) and host fraction; ``what_ifs`` one dict per what-if (also
    ``what_if_table``, Arrow, one row each); ``measured`` the runs of the same cell with the
    prediction's error; ``memory`` weights + KV cache against the GPU; ``basis`` what the
    prediction rests on (a fitted model, or hostgap's defaults)."""

    kind = "prediction"

    def __init__(self, cell: CellPrediction):
        super().__init__(cell.to_dict())
        self.cell = cell

    @property
    def prediction(self) -> dict:
        return self._doc["prediction"]

    @property
    def what_ifs(self) -> list[dict]:
        return self._doc["what_ifs"]

    @property
    def basis(self) -> str:
        return self._doc["basis"]

    @property
    def memory(self) -> dict:
        return self._doc["memory"]

    @property
    def measured(self) -> list[dict]:
        return self._doc["measured"]

    @property
    def device(self) -> str:
        return self._doc["device"]

    @cached_property
    def what_if_table(self) -> pa.Table:
        """One row per what-if: its name, step change and per-token speed-up, the baseline's
        total, the scenario's numbers (``total_ns``, ``device_ns``, ``host_ns``, ...), its own
        parameters, and how many measured runs stand beside it."""
        skip = ("baseline", "scenario", "measured")
        return arrow_table(
            {
                "name": w["name"],
                "step_change": w["step_change"],
                "per_token_speedup": w["per_token_speedup"],
                "baseline_total_ns": w["baseline"]["total_ns"],
                **w["scenario"],
                **{k: v for k, v in w.items() if k not in skip and k != "name"},
                "measured_runs": len(w["measured"]),
            }
            for w in self.what_ifs
        )

    def to_json(self) -> str:
        from hostgap.report.model_view import dumps

        return dumps(self._doc)

    def print(self, file: IO[str] | None = None) -> None:
        import sys

        from hostgap.report.model_view import prediction_lines

        out = file if file is not None else sys.stdout
        for line in prediction_lines(self.cell):
            out.write(line + "\n")
        out.flush()

    def notes(self, as_json: bool = False) -> list[str]:
        """What ``predict`` writes on stderr: with ``as_json`` the basis where it rests on
        defaults (the table prints it), and a warning where the cell does not fit in memory."""
        from hostgap.report.model_view import prediction_notes

        return prediction_notes(self.cell, as_json)

    def _summary(self) -> str:
        p = self.prediction
        return (
            f"{self._doc['preset']} on {self.device}: {p['total_ns'] / 1e6:.3f} ms per step, "
            f"host fraction {p['host_fraction']:.2f}, {len(self.what_ifs)} what-if(s)"
        )


def predict(
    preset: str,
    *,
    batch: int = 1,
    context: int = 2048,
    tp: int = 1,
    dtype: str = "bfloat16",
    engine: str = "vllm",
    mode: str = "eager",
    gpu: str = "h100-sxm",
    device_file: str | os.PathLike | None = None,
    model: str | os.PathLike | None = None,
    kernels_per_step: float | None = None,
    what_if: str | Sequence[str] = (),
    results: str | os.PathLike | Sequence[str | os.PathLike] = (),
    db: str | None = None,
    tp_form: str | None = None,
) -> Prediction:
    """Predict one decode step of ``preset`` on ``gpu`` (``hostgap predict``): device time plus
    host term, from the fitted ``model`` (a ``hostgap fit`` JSON) or hostgap's defaults, with
    each ``what_if`` (``"graphs"``, ``"spec:gamma=4,alpha=0.7"``, ``"tp=2"``, ...; one string or
    several) beside it, and the measured runs of the same cell (``results`` files, the runs
    database ``db``) with the prediction's error. ``engine``: ``vllm`` or ``hf``; ``mode``:
    ``eager`` or ``graph``; ``tp_form``: the host term against the TP degree (default: the
    model's). An unknown preset, GPU or what-if raises :class:`~hostgap.HostgapError` with the
    command's message.

    >>> import hostgap
    >>> p = hostgap.predict("llama-3.1-8b", gpu="h100", what_if="graphs")
    >>> p.prediction["total_ns"] > p.what_ifs[0]["scenario"]["total_ns"]
    True
    """
    from hostgap.model.prediction import predict_cell

    return Prediction(
        predict_cell(
            preset,
            batch=batch,
            context=context,
            tp=tp,
            dtype=dtype,
            engine=engine,
            mode=mode,
            device=gpu,
            device_file=_path(device_file),
            model=_path(model),
            kernels_per_step=kernels_per_step,
            what_ifs=_strings(what_if),
            results=_strings(results),
            db=db,
            tp_form=tp_form,
        )
    )


def _strings(x) -> list[str]:
    """One value or a sequence of them, as a list of text."""
    return [os.fspath(x)] if isinstance(x, (str, os.PathLike)) else [os.fspath(v) for v in x]


def _path(x: str | os.PathLike | None) -> str | None:
    return None if x is None else os.fspath(x)
