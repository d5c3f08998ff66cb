"""The network, Lemma 1 terms and reference GD against autograd and plain loops (float64)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from icdl import nets
from icdl.errors import InputError
from icdl.nets import ACTIVATIONS, LOSSES, NetSpec

F64 = torch.float64


def _problem(spec: NetSpec, loss: str, tasks: int, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    w = nets.init_weights(spec, (tasks,), generator=g, fan_in_scaling=True, dtype=F64)
    x = torch.randn(tasks, n, spec.in_dim, generator=g, dtype=F64)
    y = torch.randn(tasks, n, spec.out_dim, generator=g, dtype=F64)
    if loss == "logistic":
        y = torch.where(y > 0, 1.0, -1.0).to(F64)
    return w, x, y


def _autograd_grad(spec: NetSpec, loss: str, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor):
    w = w.clone().requires_grad_(True)
    risk = nets.empirical_risk(spec, loss, w, x, y).sum()  # tasks are independent: sum keeps per-task grads
    (g,) = torch.autograd.grad(risk, w)
    return g


def _loop_forward(spec: NetSpec, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """One task, one example at a time, with the weight rows v_jk read from w by hand (eq. 3.1-3.2)."""
    out = []
    for xi in x:
        p = xi
        pos = 0
        for j, (rows, cols) in enumerate(spec.shapes, start=1):
            z = torch.stack([w[pos + k * cols : pos + (k + 1) * cols] @ p for k in range(rows)])
            pos += rows * cols
            p = spec.layer_act(j).fn(z)
        out.append(p)
    return torch.stack(out)


specs = st.builds(
    NetSpec,
    depth=st.integers(2, 5),
    width=st.integers(1, 6),
    in_dim=st.integers(1, 5),
    out_dim=st.integers(1, 4),
    activation=st.sampled_from(sorted(ACTIVATIONS)),
    output=st.sampled_from(["same", "linear"]),
)


@given(
    spec=specs,
    loss=st.sampled_from(sorted(LOSSES)),
    n=st.integers(1, 9),
    seed=st.integers(0, 10_000),
    scale=st.sampled_from([0.3, 1.0, 4.0]),
)
def test_lemma1_gradient_equals_autograd(spec: NetSpec, loss: str, n: int, seed: int, scale: float) -> None:
    w, x, y = _problem(spec, loss, tasks=3, n=n, seed=seed)
    w = scale * w  # large weights push sigmoid/softplus/logistic into their saturated tails
    g = nets.gradient(spec, loss, w, x, y)
    ga = _autograd_grad(spec, loss, w, x, y)
    scale = max(ga.abs().max().item(), 1e-300)
    assert (g - ga).abs().max().item() <= 1e-12 * scale + 1e-300


@given(spec=specs, seed=st.integers(0, 10_000))
def test_forward_matches_row_by_row_loop(spec: NetSpec, seed: int) -> None:
    w, x, _ = _problem(spec, "squared", tasks=1, n=4, seed=seed)
    torch.testing.assert_close(
        nets.forward(spec, w, x)[0], _loop_forward(spec, w[0], x[0]), rtol=1e-12, atol=1e-12
    )


@given(spec=specs, seed=st.integers(0, 10_000))
def test_flatten_unflatten_roundtrip_and_row_major_order(spec: NetSpec, seed: int) -> None:
    w, _, _ = _problem(spec, "squared", tasks=2, n=1, seed=seed)
    mats = nets.unflatten(spec, w)
    assert [tuple(m.shape[-2:]) for m in mats] == list(spec.shapes)
    assert torch.equal(nets.flatten(spec, mats), w)
    # Row k of V_1 is w[k*d_x:(k+1)*d_x] (v_{1k} in eq. 3.2).
    assert torch.equal(mats[0][:, -1], w[:, (spec.width - 1) * spec.in_dim : spec.width * spec.in_dim])


def test_lemma1_terms_recursion_and_shapes() -> None:
    spec = NetSpec(4, 5, 3, 2, "tanh")
    w, x, y = _problem(spec, "squared", tasks=2, n=6, seed=1)
    t = nets.lemma1_terms(spec, "squared", w, x, y)
    Vs = nets.unflatten(spec, w)
    assert len(t.p) == spec.depth + 1 and torch.equal(t.p[0], x)
    assert [s.shape[-1] for s in t.s] == list(spec.widths[1:])
    torch.testing.assert_close(t.u, 2 * (t.p[-1] - y))  # squared loss: u = 2 (t - y)
    torch.testing.assert_close(t.s[-1], t.r_prime[-1] * t.u)  # s(N) = r'(N-1) ⊙ u
    for j in range(spec.depth - 1):  # s(j) = r'(j-1) ⊙ V_{j+1}^T s(j+1)  (eq. 3.6)
        expect = t.r_prime[j] * torch.einsum("tnk,tkl->tnl", t.s[j + 1], Vs[j + 1])
        torch.testing.assert_close(t.s[j], expect)
    # eq. 3.7: the gradient for row v_jk is (1/(2n)) sum_i s_i(j)[k] p_i(j-1).
    j, k = 1, 3
    expect = (t.s[j][:, :, k : k + 1] * t.p[j]).sum(1) / (2 * x.shape[1])
    torch.testing.assert_close(t.A[j][:, k], expect)


def test_linear_output_has_unit_derivative() -> None:
    spec = NetSpec(3, 4, 2, 3, "sigmoid", output="linear")
    w, x, y = _problem(spec, "squared", tasks=1, n=5, seed=2)
    t = nets.lemma1_terms(spec, "squared", w, x, y)
    assert torch.equal(t.r_prime[-1], torch.ones_like(t.r_prime[-1]))
    torch.testing.assert_close(t.p[-1], t.pre[-1])


@pytest.mark.parametrize("box", [None, 0.3])
@pytest.mark.parametrize("activation", ["relu", "sigmoid"])
def test_reference_gd_equals_plain_autograd_loop(box: float | None, activation: str) -> None:
    spec = NetSpec(3, 4, 3, 2, activation)
    w0, x, y = _problem(spec, "squared", tasks=4, n=8, seed=3)
    lr, steps = 0.2, 7
    traj = nets.reference_gd(spec, "squared", w0, x, y, lr=lr, steps=steps, box=box)
    assert traj.shape == (steps + 1, 4, spec.num_params)
    for b in range(4):  # one task at a time, plain autograd
        w = w0[b].clone()
        for step in range(steps):
            w = w.detach().requires_grad_(True)
            out = w
            risk = 0.5 * ((nets.forward(spec, out, x[b]) - y[b]) ** 2).sum(-1).mean()
            (g,) = torch.autograd.grad(risk, w)
            w = w.detach() - lr * g
            if box is not None:
                w = w.clamp(-box, box)
            torch.testing.assert_close(traj[step + 1, b], w, rtol=1e-12, atol=1e-13)


def test_zero_init_is_a_fixed_point_for_relu() -> None:
    """docs/paper.md, erratum E14: w^(0) = 0 never moves for a bias-free ReLU network."""
    spec = NetSpec(3, 4, 3, 1, "relu")
    _, x, y = _problem(spec, "squared", tasks=2, n=8, seed=4)
    w0 = torch.zeros(2, spec.num_params, dtype=F64)
    traj = nets.reference_gd(spec, "squared", w0, x, y, lr=0.5, steps=5)
    assert torch.equal(traj[-1], w0)


def test_sizes_match_the_paper() -> None:
    N, K, d = 4, 7, 3
    spec = NetSpec(N, K, d, d)
    assert spec.num_params == 2 * d * K + (N - 2) * K * K  # eq. 3.2
    assert spec.offsets[:3] == (0, d * K, d * K + K * K)  # Definition 2
    assert spec.num_units == (N - 1) * K + d
    assert NetSpec(3, 5, 4, 2).num_params == (4 + 2) * 5 + 5 * 5  # Lemma 15


@pytest.mark.parametrize(
    "kwargs",
    [
        {"depth": 1, "width": 3, "in_dim": 2, "out_dim": 1},
        {"depth": 3, "width": 0, "in_dim": 2, "out_dim": 1},
        {"depth": 3, "width": 3, "in_dim": 2, "out_dim": 1, "activation": "gelu"},
        {"depth": 3, "width": 3, "in_dim": 2, "out_dim": 1, "output": "softmax"},
    ],
)
def test_bad_specs_are_input_errors(kwargs: dict) -> None:
    with pytest.raises(InputError):
        NetSpec(**kwargs)


def test_runs_in_float32_and_batches_over_several_task_dims() -> None:
    spec = NetSpec(3, 4, 2, 1)
    g = torch.Generator().manual_seed(0)
    w = nets.init_weights(spec, (2, 3), generator=g)
    x = torch.randn(2, 3, 5, 2, generator=g)
    y = torch.randn(2, 3, 5, 1, generator=g)
    assert nets.gradient(spec, "squared", w, x, y).shape == (2, 3, spec.num_params)
    assert nets.forward(spec, w, x).dtype == torch.float32


def test_backward_deltas_takes_pluggable_products() -> None:
    """The one backward recursion (eq. 3.6): explicit default products give the same bits as the built-in
    ones, and a derivative product scaled by c scales s(j) by c^(N-j+1) (each layer multiplies once more)."""
    from icdl.nets import backward_deltas, lemma1_terms, unflatten

    spec = NetSpec(3, 4, 3, 2, activation="tanh")
    g = torch.Generator().manual_seed(0)
    w = torch.randn(spec.num_params, generator=g, dtype=torch.float64)
    x = torch.randn(6, 3, generator=g, dtype=torch.float64)
    y = torch.randn(6, 2, generator=g, dtype=torch.float64)
    t = lemma1_terms(spec, "squared", w, x, y)
    Vs = unflatten(spec, w)
    s, back = backward_deltas(
        t.r_prime, t.u, Vs, transpose=lambda j, V, sn: sn @ V, derivative=lambda j, rp, m: rp * m
    )
    assert all(torch.equal(a, b) for a, b in zip(s, t.s, strict=True))
    assert torch.equal(back[-1], t.u)
    c = 0.5
    scaled, _ = backward_deltas(t.r_prime, t.u, Vs, derivative=lambda j, rp, m: c * (rp * m))
    for j in range(1, spec.depth + 1):
        torch.testing.assert_close(scaled[j - 1], c ** (spec.depth - j + 1) * t.s[j - 1], rtol=1e-12, atol=0)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_first_rows_of_a_masked_recursion_are_the_examples_terms(activation: str) -> None:
    """The examples' rows of terms over examples and a masked query token are the terms of the examples
    alone (per-example tensors, A, the gradient), also where the query's forward pass overflows or is NaN
    (its ``0 * inf`` or ``0 * NaN`` makes the masked gradient NaN)."""
    spec = NetSpec(3, 5, 3, 2, activation=activation)
    g = torch.Generator().manual_seed(7)
    n = 9
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    y = torch.randn(n, 2, generator=g, dtype=torch.float64)
    w = nets.init_weights(spec, generator=g, dtype=torch.float64)
    mask = torch.cat([torch.ones(n, dtype=x.dtype), torch.zeros(1, dtype=x.dtype)])
    want = nets.lemma1_terms(spec, "squared", w, x, y)
    assert float(want.grad.abs().max()) > 1e-3  # not vacuous
    poisoned = []
    for scale in (1.0, 1e300, math.nan):
        query = scale * torch.randn(3, generator=g, dtype=x.dtype)
        x_all, y_all = torch.cat([x, query[None]]), torch.cat([y, torch.zeros(1, 2, dtype=y.dtype)])
        masked = nets.lemma1_terms(spec, "squared", w, x_all, y_all, mask=mask)
        got = masked.first_rows(n)
        for a, b in [
            *zip(got.pre, want.pre, strict=True),
            *zip(got.p, want.p, strict=True),
            *zip(got.r_prime, want.r_prime, strict=True),
            *zip(got.s, want.s, strict=True),
            *zip(got.A, want.A, strict=True),
            *zip(got.back, want.back, strict=True),
            (got.u, want.u),
            (got.grad, want.grad),
        ]:
            assert a.shape == b.shape and len(got.back) == spec.depth
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-15)
        poisoned.append(not bool(torch.isfinite(masked.grad).all()))
    assert poisoned[0] is False and poisoned[-1] is True  # the NaN query did poison the masked sum
