"""``_round_up``, the last step of every automatic range (``--range auto``): never below its argument."""

from __future__ import annotations

import math
import random

from icdl.construct.bounds.ranges import _round_up


def _cases() -> list[float]:
    rng = random.Random(0)
    out = [rng.uniform(0, 1) * 10.0 ** rng.randint(-12, 12) for _ in range(20_000)]
    for k in range(100, 1000):  # three-digit values and their neighbours, where the division rounds
        for e in range(-9, 9, 3):
            v = k * 10.0**e
            out += [v, math.nextafter(v, math.inf), math.nextafter(v, 0.0)]
    return out


def test_round_up_never_rounds_down_and_keeps_three_digits() -> None:
    for v in _cases():
        r = _round_up(v)
        assert r >= v, v  # an a-priori range below its bound would be unsound
        assert r <= v * (1 + 0.021), v  # at most two steps of the third digit
        assert math.isclose(float(f"{r:.3g}"), r, rel_tol=1e-12), (v, r)  # three significant digits


def test_round_up_passes_non_positive_and_non_finite_values() -> None:
    assert _round_up(0.0) == 0.0 and _round_up(-2.5) == -2.5
    assert _round_up(math.inf) == math.inf and math.isnan(_round_up(math.nan))
    assert _round_up(13.1) == 13.1 and _round_up(12.34) == 12.4
