"""Overflow-safe float arithmetic for the closed forms of [`icdl.theory`][icdl.theory],
[`icdl.theory_bounds`][icdl.theory_bounds].

The bounds grow like ``x^N`` and the sizes like ``N K^2``: for deep or wide networks they leave the float
range, and ``inf`` (not an ``OverflowError``) is the honest answer. ``check_int`` validates the integer
arguments of the size formulas (one-line [`InputError`][icdl.errors.InputError]).
"""

from __future__ import annotations

import math

from icdl.errors import InputError

__all__ = ["check_int", "geo_sum", "safe_div", "safe_float", "safe_pow", "safe_prod"]


def check_int(name: str, value: int, low: int) -> int:
    """``value`` when it is an integer (not a bool) ``>= low``; [`InputError`][icdl.errors.InputError]
    otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def safe_pow(base: float, exp: float) -> float:
    """``base ** exp`` in floats, ``inf`` instead of Python's OverflowError (the bounds grow like
    ``x^N`` and may exceed the float range for deep networks; ``inf`` is the honest answer)."""
    try:
        return float(base) ** exp
    except OverflowError:
        return math.inf


def safe_float(x: int | float) -> float:
    """``float(x)``, ``inf`` for an integer too large for a float."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


def safe_div(a: float, b: float) -> float:
    """``a / b`` with ``inf`` for overflow or a zero denominator (``a > 0``)."""
    try:
        return a / b
    except ZeroDivisionError:
        return math.inf if a > 0 else math.nan
    except OverflowError:
        return math.inf


def geo_sum(q: float, m: int) -> float:
    """``sum_{l=0}^{m-1} q^l`` in closed form (no O(m) loop): ``(q^m - 1) / (q - 1)``, ``m`` when
    ``q = 1``; ``inf`` on overflow."""
    if m <= 0:
        return 0.0
    if q == 1:
        return float(m)
    if q < 1:
        return (1 - safe_pow(q, m)) / (1 - q)
    return safe_div(safe_pow(q, m) - 1, q - 1)


def safe_prod(*factors: float) -> float:
    """Product where an exact zero wins over infinity (an error term with eps = 0 is 0, even when the
    Lipschitz constant in front of it is infinite, as for ReLU's r')."""
    if any(f == 0 for f in factors):
        return 0.0
    return math.prod(factors)
