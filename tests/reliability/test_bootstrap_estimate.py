"""The memory estimate of ``icdl score evaluate`` covers the bootstrap (issue 34, item 3): resamples x
prompts, measured as the peak resident memory (VmHWM) a child process adds while it computes the bands."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from icdl.diffusion.budget import score_curves_estimate
from icdl.diffusion.config import load_score_config

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CHILD = """
import sys, torch
from icdl.icl.metrics import bootstrap_bands
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
R, B = int(sys.argv[1]), int(sys.argv[2])
ys = torch.randn(B, 3, 2, dtype=torch.float64)
preds = ys + 0.1 * torch.randn(B, 3, 2, dtype=torch.float64)
bootstrap_bands(preds[:8], ys[:8], resamples=2)  # warm: imports and kernels before the baseline
base = hwm()
bootstrap_bands(preds, ys, resamples=R)
print(hwm() - base)
"""


def _estimate(prompts: int, resamples: int) -> float:
    cfg = load_score_config("score-small")
    args = {"mlp_ks": 1, "mlp_epochs": 1, "mlp_depth": 2, "mlp_width": 8, "gd_steps": 0, "gd_width": 8}
    return score_curves_estimate(cfg, prompts=prompts, resamples=resamples, **args).bytes


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="VmHWM is Linux's")
@pytest.mark.parametrize(("resamples", "prompts"), [(1000, 4000), (2000, 4000)])
def test_bootstrap_memory_within_estimate(resamples: int, prompts: int) -> None:
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(resamples), str(prompts)],
        capture_output=True, text=True, env=ENV, timeout=300, check=True,
    )  # fmt: skip
    measured = int(p.stdout.split()[-1])
    # The part of the estimate that depends on resamples: what the bootstrap adds to a run of one resample.
    added = _estimate(prompts, resamples) - _estimate(prompts, 1)
    assert measured > 50 * 2**20  # non-degenerate: the bootstrap dominates the child's growth
    assert measured / 1.5 <= added <= 1.5 * measured, (added, measured)
