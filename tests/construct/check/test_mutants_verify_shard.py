"""Survivors of the ``check/verify.py`` mutmut shard (issue 35) outside the L_f estimate
(``test_mutants_verify_lipschitz.py``): each test states the property the mutant broke."""

from __future__ import annotations

import pytest

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.nets import NetSpec


@pytest.mark.parametrize("depth", [2, 3])
def test_a_linear_output_layer_checks_each_hidden_sum_against_its_own_activation(depth: int) -> None:
    """With ``output="linear"`` the last layer is the identity and the hidden layers keep r: the declared-sum
    check compares each fitted hidden sum with tanh (the identity is exact and not checked), so a clean
    construction is within its declared errors."""
    spec = NetSpec(depth, 3, 2, 1, activation="tanh", output="linear")
    model = compile_gd_transformer(spec, steps=2, n=6, eps=1e-2, lr=0.3)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=3)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.worst_sum is not None and 1 <= rep.worst_sum[1] < depth  # only hidden layers' sums are fitted
    assert rep.sum_error_ratio is not None and 0 < rep.sum_error_ratio <= 1
    assert not any(f.startswith("(b) declared") for f in rep.failures), rep.failures


def test_the_worst_sum_is_named_as_the_failures_name_it() -> None:
    """``worst_sum = (name, layer, measured, declared)`` with name ``"r"`` or ``"r'"`` (the failure line's
    "the r' sum of layer j"): two prompts whose worst fitted sum is the r one and the r' one."""
    spec = NetSpec(2, 3, 2, 1, activation="tanh", output="linear")
    model = compile_gd_transformer(spec, steps=2, n=6, eps=1e-2, lr=0.3)
    names = set()
    for seed in (0, 1):
        x, y, xq, w0, _ = sample_task(spec, 6, seed=seed)
        rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
        assert rep.worst_sum is not None
        names.add(rep.worst_sum[0])
    assert names == {"r", "r'"}


def test_a_sum_that_sees_no_argument_inside_its_range_is_not_measured() -> None:
    """A fitted range too small for every pre-activation of the one fitted layer (the output layer is
    linear, exact): nothing to compare its sums on (no declared-sum ratio), and the arguments outside it are
    what fails, (b) range."""
    spec = NetSpec(2, 3, 2, 1, activation="tanh", output="linear")
    model = compile_gd_transformer(spec, steps=1, n=6, eps=1e-8, lr=0.3, radius=1e-6)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=3)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.out_of_range_count is not None and rep.out_of_range_count > 0
    assert rep.worst_sum is None and rep.sum_error_ratio is None
    assert any(f.startswith("(b) range") for f in rep.failures)
