"""icdl.diffusion.metrics.mmd is the *unbiased* squared MMD (as documented): checked against a plain loop."""

from __future__ import annotations

import math

import pytest
import torch

from icdl.diffusion.metrics import mmd


def _loop_mmd2(a: list[list[float]], b: list[list[float]], bw: float) -> float:
    """Unbiased MMD^2 (Gretton et al. 2012, eq. 3): within-sample means over i != j only."""

    def k(x: list[float], y: list[float]) -> float:
        return math.exp(-sum((p - q) ** 2 for p, q in zip(x, y, strict=True)) / (2 * bw * bw))

    m, n = len(a), len(b)
    saa = sum(k(a[i], a[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    sbb = sum(k(b[i], b[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    sab = sum(k(x, y) for x in a for y in b) / (m * n)
    return saa + sbb - 2 * sab


@pytest.mark.parametrize(("m", "n", "bw"), [(3, 5, 0.7), (6, 4, 1.5), (2, 2, 1.0)])
def test_mmd_is_the_unbiased_estimator(m: int, n: int, bw: float) -> None:
    g = torch.Generator().manual_seed(m * 10 + n)
    a = torch.randn(m, 2, generator=g, dtype=torch.float64)
    b = torch.randn(n, 2, generator=g, dtype=torch.float64) + 0.3
    want = _loop_mmd2(a.tolist(), b.tolist(), bw)
    assert mmd(a, b, bandwidth=bw) == pytest.approx(want, rel=1e-12, abs=1e-14)


def test_unbiased_mmd_of_one_sample_with_itself_is_negative() -> None:
    """The unbiased estimator is not a distance: for a == b it is ``2 (mean off-diagonal k - 1) / m`` < 0
    (the biased V-statistic would give exactly 0)."""
    a = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    assert mmd(a, a, bandwidth=1.0) == pytest.approx(_loop_mmd2(a.tolist(), a.tolist(), 1.0), rel=1e-12)
    assert mmd(a, a, bandwidth=1.0) < 0
