"""roofline.py pinned with explicit parameters and hand-derived values.

Every expected number is worked out beside it from the definitions in the module docstring
(``t_min + smax_q(FLOPs / (peak e_c), bytes / (BW e_m))``), never read back from the code.
"""

from __future__ import annotations

import numpy as np
import pytest

from hostgap.model import roofline
from hostgap.model.accounting import Account, Cell, Op
from hostgap.model.devices import DeviceSpec
from hostgap.model.roofline import Efficiency, RooflineModel

DEV = DeviceSpec("test-gpu", {"bfloat16": 100e12}, 1e12, 80e9, 900e9)


def test_device_time_sums_count_times_op_time_labels_the_bound_and_sets_collectives_aside():
    model = RooflineModel("test-gpu", {"gemm": Efficiency(1_000.0, 0.5, 0.5), "norm": Efficiency(2_000.0, 0.5, 0.25)})
    ops = (
        # compute 1e12 / (100e12 x 0.5) = 20 ms; memory 1e9 / (1e12 x 0.5) = 2 ms: compute-bound,
        # 1 us + 20 ms = 20,001,000 ns an instance
        Op("qkv", "gemm", 2, 1e12, 1e9),
        # compute 1e6 / 50e12 = 20 ns; memory 1e8 / (1e12 x 0.25) = 400 us: memory-bound,
        # 2 us + 400 us = 402,000 ns an instance
        Op("norm", "norm", 3, 1e6, 0.0, act_bytes=1e8),
        # collectives are not timed: 4 instances of 5 MB
        Op("ar", "collective", 4, 0.0, 0.0, act_bytes=5e6),
        # a second op of the same name adds to its row: 1 more instance of qkv
        Op("qkv", "gemm", 1, 1e12, 1e9),
    )
    dt = roofline.device_time(Account("t", Cell(), ops), DEV, model)
    assert dt.per_op_ns == pytest.approx({"qkv": 3 * 20_001_000.0, "norm": 3 * 402_000.0})
    assert dt.total_ns == pytest.approx(60_003_000.0 + 1_206_000.0)
    assert dt.bound == {"qkv": "compute", "norm": "memory"}
    assert (dt.collective_bytes, dt.collective_ops) == (2e7, 4)


def test_band_weights_give_every_factor_of_two_band_the_same_total_weight():
    """Tokens 1..8 fall in bands [1], [2, 3], [4..7], [8]: each row's weight is 1 / sqrt(rows in
    its band), so every band's squared weights sum to 1 (weights multiply residuals)."""
    from hostgap.model.roofline import band_weights

    w = band_weights(np.arange(1, 9), 8)
    h = 2**-0.5
    assert w == pytest.approx([1.0, h, h, 0.5, 0.5, 0.5, 0.5, 1.0])
    band = np.floor(np.log2(np.arange(1, 9))).astype(int)
    assert np.bincount(band, weights=w**2) == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert (band_weights(None, 3) == 1.0).all()
