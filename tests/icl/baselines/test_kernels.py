"""ridge_tuned and kernel baselines against plain numpy / Monte Carlo references
(icdl.icl.baselines.kernel)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from icdl import nets
from icdl.errors import InputError
from icdl.icl.baselines import kernel as kr

F64 = torch.float64


def _prompts(B: int = 5, n: int = 12, d: int = 3, d_y: int = 1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    spec = nets.NetSpec(3, 8, d, d_y, output="linear")
    w = nets.init_weights(spec, (B,), generator=g, fan_in_scaling=True, dtype=F64)
    xs = torch.randn(B, n, d, generator=g, dtype=F64)
    return xs, nets.forward(spec, w, xs)


@pytest.mark.parametrize("d_y", [1, 2])
@pytest.mark.parametrize("lam", [1e-3, 0.7, 30.0])
def test_ridge_tuned_fixed_lambda_matches_closed_form(lam: float, d_y: int) -> None:
    xs, ys = _prompts(B=4, n=10, d=4, d_y=d_y, seed=1)
    got = kr.RidgeTunedBaseline(lam=lam)(xs, ys).numpy()
    X, Y = xs.numpy(), ys.numpy()
    ref = np.zeros_like(Y)
    for b in range(4):
        for k in range(1, 10):
            Xk, Yk = X[b, :k], Y[b, :k]
            w = np.linalg.solve(Xk.T @ Xk + lam * np.eye(4), Xk.T @ Yk)  # primal, no intercept
            ref[b, k] = X[b, k] @ w
    np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-9)


def test_per_k_lambda_is_used_per_k() -> None:
    xs, ys = _prompts(B=3, n=6, seed=2)
    lams = [1.0, 0.01, 100.0, 0.5]
    got = kr.RidgeTunedBaseline(lam=lams)(xs, ys)
    for k in range(6):
        one = kr.RidgeTunedBaseline(lam=lams[min(k, 3)])(xs, ys)
        torch.testing.assert_close(got[:, k], one[:, k], rtol=0, atol=0)


def test_kernel_ridge_matches_explicit_solve() -> None:
    xs, ys = _prompts(B=3, n=9, d=3, d_y=2, seed=3)
    base = kr.KernelBaseline(depth=3, lam=0.05)
    got = base(xs, ys).numpy()
    K = base.gram(xs).numpy()
    Y = ys.numpy()
    for b in range(3):
        assert np.allclose(got[b, 0], 0)
        for k in range(1, 9):
            alpha = np.linalg.solve(K[b, :k, :k] + 0.05 * np.eye(k), Y[b, :k])
            np.testing.assert_allclose(got[b, k], K[b, k, :k] @ alpha, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("i", [0, 3, 7])
def test_causality(i: int) -> None:
    """Changing y_i and x_{i+1..} leaves the predictions at positions <= i bit-identical."""
    xs, ys = _prompts(B=4, n=10, d=3, d_y=2, seed=9)
    xs2, ys2 = xs.clone(), ys.clone()
    ys2[:, i] += 5.0
    xs2[:, i + 1 :] = -xs2[:, i + 1 :] * 3
    for base in (kr.RidgeTunedBaseline(lam=[0.1, 1.0, 0.01]), kr.KernelBaseline(depth=3, lam=0.3)):
        a, b = base(xs, ys), base(xs2, ys2)
        assert torch.equal(a[:, : i + 1], b[:, : i + 1]), base.name
        assert not torch.equal(a[:, i + 1 :], b[:, i + 1 :]), base.name


def test_tuner_picks_smallest_lambda_on_noiseless_linear_task() -> None:
    g = torch.Generator().manual_seed(4)
    # Noiseless y = xᵀw with w ~ N(0, I): the posterior mean is the λ -> 0 limit (min-norm / least
    # squares), so the smallest λ is optimal in expectation; 2,048 prompts make the k = 1 choice reliable.
    xs = torch.randn(2048, 12, 4, generator=g, dtype=F64)
    w = torch.randn(2048, 4, 1, generator=g, dtype=F64)
    # Grid values a decade+ apart: neighbouring tiny λ give MSEs equal up to sampling noise.
    base = kr.RidgeTunedBaseline(lambdas=(1e-4, 0.3, 10.0, 300.0), refine=0)
    ys = xs @ w
    chosen = base.tune(xs, ys)
    assert chosen[1:] == [1e-4] * 11
    assert chosen[0] == 300.0  # k = 0: every λ predicts 0; ties go to the largest
    # and the choice is the argmin of the held-out MSE computed independently
    for k in (1, 4, 9):
        mse = []
        for lam in base.lambdas:
            p = kr.RidgeTunedBaseline(lam=lam)(xs, ys)
            mse.append(float(((p[:, k] - ys[:, k]) ** 2).mean()))
        assert base.lambdas[int(np.argmin(mse))] == chosen[k]


def test_tuner_picks_largest_lambda_on_pure_noise() -> None:
    g = torch.Generator().manual_seed(5)
    xs = torch.randn(1024, 12, 4, generator=g, dtype=F64)
    ys = torch.randn(1024, 12, 1, generator=g, dtype=F64)
    grid = (1e-3, 0.3, 1e4)  # well separated: λ >> |x|² all predict ≈ 0 and tie up to noise
    for base in (
        kr.RidgeTunedBaseline(lambdas=grid, refine=0),
        kr.KernelBaseline(depth=2, lambdas=grid, refine=0),
    ):
        chosen = base.tune(xs, ys)
        assert chosen == [1e4] * 12, base.name
        assert base.tuning is not None and base.tuning["num_prompts"] == 1024


def test_untuned_and_bad_settings_are_input_errors() -> None:
    xs, ys = _prompts()
    with pytest.raises(InputError):
        kr.RidgeTunedBaseline()(xs, ys)
    with pytest.raises(InputError):
        kr.RidgeTunedBaseline(lambdas=(0.0, 1.0))
    with pytest.raises(InputError):
        kr.KernelBaseline(lam=-1.0)
    with pytest.raises(InputError):
        kr.nngp_kernel(xs, 1)


def _mc_kernel(x: torch.Tensor, depth: int, act, width: int, reps: int, seed: int):
    """Monte Carlo estimate of the output covariance and its standard error, He scaling.

    Each of ``reps`` independent width-``width`` networks gives ``σ_N² Σ_i p_i(x) p_i(x')`` (the output
    layer's weights averaged analytically). With one hidden layer the hidden units are i.i.d., so one
    network suffices and the standard error comes from the units; otherwise from the ``reps`` networks.
    """
    g = torch.Generator().manual_seed(seed)
    ests = []
    for _ in range(reps):
        p, fan_in = x, x.shape[-1]
        for _layer in range(depth - 1):
            V = torch.randn(width, fan_in, generator=g, dtype=F64) * math.sqrt(2.0 / fan_in)
            p, fan_in = act(p @ V.T), width
        if depth == 2:  # (width, T, T) per-unit terms 2 p_i(x) p_i(x'), i.i.d. over units
            units = 2.0 * p.T[:, :, None] * p.T[:, None, :]
            return units.mean(0), units.std(0) / math.sqrt(width)
        ests.append(2.0 / fan_in * p @ p.T)
    e = torch.stack(ests)
    return e.mean(0), e.std(0) / math.sqrt(reps)


@pytest.mark.parametrize(
    ("depth", "activation"), [(2, "relu"), (3, "relu"), (4, "relu"), (3, "sigmoid"), (2, "tanh")]
)
def test_nngp_kernel_matches_monte_carlo_wide_networks(depth: int, activation: str) -> None:
    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, 3, generator=g, dtype=F64)
    x[3] = -0.5 * x[0]  # an anti-correlated pair
    exact = kr.nngp_kernel(x[None], depth, activation=activation)[0]
    act = nets.get_activation(activation).fn
    width, reps = (200_000, 1) if depth == 2 else (4_000, 16)
    mean, se = _mc_kernel(x, depth, act, width=width, reps=reps, seed=depth)
    # 5 standard errors plus the O(1/width) finite-width bias; a wrong recursion is off by far more.
    tol = 5 * se + 1e-3 * exact.abs().max()
    assert ((mean - exact).abs() <= tol).all(), (mean - exact, tol)


def test_quadrature_exact_for_identity_and_close_to_arccos_for_relu() -> None:
    g = torch.Generator().manual_seed(12)
    a = torch.randn(1, 6, 4, generator=g, dtype=F64)
    cov = a @ a.transpose(-1, -2)
    # E[u v] = cov exactly: Gauss–Hermite is exact for degree-2 polynomials.
    torch.testing.assert_close(kr.gauss_hermite_expectation(cov, lambda t: t, points=5), cov)
    # ReLU's kink makes quadrature converge slowly: only a loose check of the closed form.
    ref = kr.gauss_hermite_expectation(cov, torch.relu, points=200)
    torch.testing.assert_close(kr.relu_expectation(cov), ref, rtol=2e-2, atol=2e-3)


def test_kernel_for_task_takes_the_target_family_from_the_task_config() -> None:
    from icdl.config import load_config

    task = load_config("cpu-centred").task
    base = kr.KernelBaseline.for_task(task, lam=0.5)
    assert (base.depth, base.activation, base.output, base.width) == (
        task.depth,
        task.activation,
        task.output,
        task.width,
    )
    assert (base.weight_std, base.fan_in_scaling, base.lam) == (task.weight_std, task.fan_in_scaling, 0.5)
