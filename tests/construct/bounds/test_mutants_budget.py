"""The a-priori step budget against an independent computation (issue 35: mutmut's survivors in
``construct/bounds/budget.py``).

``step_budget`` propagates declared sup errors through one GD step with tensors, skipping products whose
factor is exactly 0; ``_reference`` below follows the module docstring's equations one example and one entry
at a time with Python floats (every product formed). They must agree on declarations that exercise each
term on its own layer (distinct per-layer errors, products' errors, a finite loss-derivative range), on
ReLU, smooth and linear output layers, at weights with units whose pre-activation is exactly 0 and at a
relu' step width equal to a pre-activation. The remaining tests pin what the closed form fixes (the
round-off term), the parts of the largest budget the summary prints, the declared errors of fitted sums,
and that an exact construction forms no product of its (zero) error terms."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.bounds.budget import (
    SAMPLING_MARGIN,
    Declared,
    StepBudget,
    declared_sums,
    largest,
    step_budget,
    sum_error,
    sums_only,
)
from icdl.construct.engine.terms import Terms
from icdl.nets import NetSpec, OutputKind, get_loss, lemma1_terms, unflatten

LR, TOL = 0.2, 1e-9


def _reference(
    spec: NetSpec,
    loss: str,
    dec: Declared,
    w: Tensor,
    x: Tensor,
    y: Tensor,
    *,
    lr: float,
    tol: float,
    delta: float,
) -> tuple[float, float, float, float, int]:
    """``(total, approximation, tolerance, roundoff, u_out_of_range)`` of the module docstring, per example
    and entry in Python floats: the exact terms of Lemma 1 at ``w`` and the declared errors, nothing else."""
    ex = lemma1_terms(spec, loss, w, x, y)
    V = [m.tolist() for m in unflatten(spec, w)]
    N, n, widths = spec.depth, x.shape[0], spec.widths
    der = list(dec.derivative) if dec.derivative else [0.0] * N
    pre = [t.tolist() for t in ex.pre]
    p = [t.tolist() for t in ex.p]
    rp = [t.tolist() for t in ex.r_prime]
    s = [t.tolist() for t in ex.s]
    u, ys = ex.u.tolist(), y.tolist()
    # E[j-1][k][m]: |Ā_j - A_j| entry (k, m) times 2n; mag the same for |s|^T |p|
    E = [[[0.0] * widths[j - 1] for _ in range(widths[j])] for j in range(1, N + 1)]
    mag = [[[0.0] * widths[j - 1] for _ in range(widths[j])] for j in range(1, N + 1)]
    u_out = 0
    for i in range(n):
        e_p: list[list[float]] = [[0.0] * widths[0]]
        e_rp: list[list[float]] = []
        zero: list[list[bool]] = []
        live = widths[0]  # entries of p̄(j-1) not known to be exactly 0
        for j in range(1, N + 1):
            act = spec.layer_act(j)
            rows = V[j - 1]
            e_z = [
                sum(abs(rows[k][m]) * e_p[-1][m] for m in range(widths[j - 1])) + dec.forward * live
                for k in range(widths[j])
            ]
            z = pre[j - 1][i]
            if act.name == "relu":
                zj = [z[k] + e_z[k] <= 0 for k in range(widths[j])]
                e_p.append([0.0 if zj[k] else e_z[k] for k in range(widths[j])])
                e_rp.append(
                    [
                        float((z[k] - e_z[k] < delta) if z[k] > 0 else (z[k] + e_z[k] > 0))
                        for k in range(widths[j])
                    ]
                )
                live = sum(not q for q in zj)
            elif act.name == "identity":
                zj = [False] * widths[j]
                e_p.append(list(e_z))
                e_rp.append([0.0] * widths[j])
                live = widths[j]
            else:
                zj = [False] * widths[j]
                e_p.append([dec.r[j - 1] + act.lipschitz * e for e in e_z])
                e_rp.append([dec.r_prime[j - 1] + act.deriv_lipschitz * e for e in e_z])
                live = widths[j]
            zero.append(zj)
        e_u = [dec.u + get_loss(loss).deriv_lipschitz * e for e in e_p[N]]
        if math.isfinite(dec.u_range):
            u_out += sum(abs(p[N][i][k]) + e_p[N][k] > dec.u_range for k in range(widths[N]))
            u_out += sum(abs(v) > dec.u_range for v in ys[i])
        b, e_b = u[i], e_u
        for j in range(N, 0, -1):
            zj = zero[j - 1]
            e_s = [
                0.0
                if zj[k]
                else e_rp[j - 1][k] * (abs(b[k]) + e_b[k]) + abs(rp[j - 1][i][k]) * e_b[k] + der[j - 1]
                for k in range(widths[j])
            ]
            sj, pin = s[j - 1][i], p[j - 1][i]
            for k in range(widths[j]):
                for m in range(widths[j - 1]):
                    E[j - 1][k][m] += (
                        e_s[k] * (abs(pin[m]) + e_p[j - 1][m])
                        + abs(sj[k]) * e_p[j - 1][m]
                        + (0.0 if zj[k] else dec.gradient)
                    )
                    mag[j - 1][k][m] += abs(sj[k]) * abs(pin[m])
            rows = V[j - 1]
            n_live = sum(not q for q in zj)
            b = [sum(rows[k][m] * sj[k] for k in range(widths[j])) for m in range(widths[j - 1])]
            e_b = [
                sum(abs(rows[k][m]) * e_s[k] for k in range(widths[j])) + dec.transpose * n_live
                for m in range(widths[j - 1])
            ]
    err = [e / (2 * n) for layer in E for row in layer for e in row]
    approx = math.sqrt(sum(e * e for e in err))
    grad = ex.grad.tolist()
    written = [abs(wv) + lr * (abs(g) + e) for wv, g, e in zip(w.tolist(), grad, err, strict=True)]
    tol_term = math.sqrt(sum((tol * max(1.0, v) / lr) ** 2 for v in written))
    unit = torch.finfo(w.dtype).eps / 2
    k_len = n + N * max(widths) + 8
    mag_norm = math.sqrt(sum((v / (2 * n)) ** 2 for layer in mag for row in layer for v in row))
    roundoff = 2 * k_len * unit / (1 - k_len * unit) * mag_norm
    return approx + tol_term + roundoff, approx, tol_term, roundoff, u_out


def _close(got: StepBudget, want: tuple[float, float, float, float, int]) -> None:
    total, approx, tol_term, roundoff, u_out = want
    assert got.u_out_of_range == u_out
    assert (got.total, got.approximation, got.tolerance, got.roundoff) == pytest.approx(
        (total, approx, tol_term, roundoff), rel=1e-12, abs=0.0
    )


# distinct errors per layer and per kind, so an error read from another layer or kind changes the budget
SUMS = Declared(r=(0.0, 2e-3, 3e-3), r_prime=(1e-3, 0.0, 4e-3), u=5e-3, derivative=(1e-3, 2e-3, 3e-3))
PRODUCTS = Declared(
    r=(0.0, 0.0, 0.0), r_prime=(0.0, 0.0, 0.0), u=0.0, forward=2e-3, transpose=3e-3, gradient=4e-3
)
# a sup error of exactly 1 is a declaration like any other (the products' terms must not test for 1)
UNIT_PRODUCTS = Declared(
    r=(0.0, 0.0, 0.0), r_prime=(0.0, 0.0, 0.0), u=0.0, forward=1.0, transpose=1.0, gradient=1.0
)
DECLARED = {"sums": SUMS, "products": PRODUCTS, "unit products": UNIT_PRODUCTS}


def _task(spec: NetSpec, seed: int = 100) -> tuple[Tensor, Tensor, Tensor]:
    x, y, _, w0, _ = sample_task(spec, 6, seed=seed)
    return x, y, w0


def _dead_unit(spec: NetSpec, w: Tensor, layer: int, unit: int) -> Tensor:
    """``w`` with row ``unit`` of ``V_layer`` set to 0: that unit's pre-activation is exactly 0."""
    out = w.clone()
    cols = spec.shapes[layer - 1][1]
    start = spec.offsets[layer - 1] + unit * cols
    out[start : start + cols] = 0.0
    return out


@pytest.mark.parametrize("output", ["same", "linear"])
@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "softplus"])
def test_step_budget_is_the_entrywise_propagation(activation: str, output: OutputKind) -> None:
    """Every declaration, at the task's weights, 3x them and with a unit whose pre-activation is exactly 0 in
    layers 1 and 2, with and without relu' window hits."""
    spec = NetSpec(3, 3, 2, 1, activation=activation, output=output)
    x, y, w0 = _task(spec)
    weights = [w0, 3 * w0, _dead_unit(spec, _dead_unit(spec, w0, 1, 0), 2, 1)]
    for dec in DECLARED.values():
        for w in weights:
            for delta in (1e-9, 0.3):
                got = step_budget(spec, "squared", dec, w, x, y, lr=LR, tol=TOL, delta=delta)
                _close(got, _reference(spec, "squared", dec, w, x, y, lr=LR, tol=TOL, delta=delta))


def test_a_relu_unit_at_exactly_zero_is_a_known_zero() -> None:
    """A ReLU unit with ``z = 0`` and no forward error has ``p̄ = r̄' = s̄ = 0`` exactly: its declared product
    errors (r'b, p s, v s) are not counted. Compared at each layer's dead unit on its own."""
    spec = NetSpec(3, 3, 2, 1, activation="relu")
    x, y, w0 = _task(spec, seed=101)
    dec = dataclasses.replace(PRODUCTS, forward=0.0, derivative=(1e-3, 2e-3, 3e-3))
    for layer, unit in ((1, 0), (1, 2), (2, 1)):
        w = _dead_unit(spec, w0, layer, unit)
        assert bool((lemma1_terms(spec, "squared", w, x, y).pre[layer - 1][:, unit] == 0).all())
        got = step_budget(spec, "squared", dec, w, x, y, lr=LR, tol=TOL, delta=1e-9)
        _close(got, _reference(spec, "squared", dec, w, x, y, lr=LR, tol=TOL, delta=1e-9))
        alive = step_budget(spec, "squared", dec, w0, x, y, lr=LR, tol=TOL, delta=1e-9)
        assert got.approximation < alive.approximation  # the dead unit's products are not counted


def test_a_pre_activation_at_the_step_width_is_not_a_window_hit() -> None:
    """relu' of the step of width δ is 1 from δ on: a ReLU unit with ``z = δ`` exactly (no forward error), or
    whose lowest ``z̄ = z - e_z`` is δ exactly, cannot switch; just above that it can (the budget grows)."""
    spec = NetSpec(3, 3, 2, 1, activation="relu")
    x, y, w0 = _task(spec, seed=102)
    z = lemma1_terms(spec, "squared", w0, x, y).pre[0]
    positive = z[z > 0]
    assert positive.numel() > 0
    # no forward error: the window is 0 < z < δ, with δ one of the pre-activations
    dec = dataclasses.replace(SUMS, r=(0.0, 0.0, 0.0), r_prime=(0.0, 0.0, 0.0), u=0.0)
    edge = float(positive.min())
    at = step_budget(spec, "squared", dec, w0, x, y, lr=LR, tol=TOL, delta=edge)
    _close(at, _reference(spec, "squared", dec, w0, x, y, lr=LR, tol=TOL, delta=edge))
    above = step_budget(spec, "squared", dec, w0, x, y, lr=LR, tol=TOL, delta=math.nextafter(edge, math.inf))
    assert above.approximation > at.approximation
    # forward error e_z = ε_fwd d_x in layer 1: the window is z - e_z < δ
    fwd = dataclasses.replace(dec, forward=1e-3)
    e_z = torch.zeros_like(z) + fwd.forward * float(spec.in_dim)
    low = (z - e_z)[z - e_z > 0]
    assert low.numel() > 0
    edge = float(low.min())
    at = step_budget(spec, "squared", fwd, w0, x, y, lr=LR, tol=TOL, delta=edge)
    _close(at, _reference(spec, "squared", fwd, w0, x, y, lr=LR, tol=TOL, delta=edge))
    above = step_budget(spec, "squared", fwd, w0, x, y, lr=LR, tol=TOL, delta=math.nextafter(edge, math.inf))
    assert above.approximation > at.approximation


def test_arguments_outside_the_loss_derivative_range_are_counted() -> None:
    """``u_out_of_range`` counts ``|p(N)| + e_p(N)`` and ``|y|`` above the u sum's range R, each entry once;
    a value exactly at R is inside."""
    spec = NetSpec(3, 3, 2, 2, activation="tanh")
    x, y, w0 = _task(spec)
    y = 3 * y  # labels on both sides of the outputs' range
    ex = lemma1_terms(spec, "squared", w0, x, y)
    wide = Declared(r=(0.1, 0.2, 0.3), r_prime=(0.0, 0.0, 0.0), u=0.0)
    values = sorted({*ex.p[-1].abs().flatten().tolist(), *y.abs().flatten().tolist()})
    seen = set()
    for R in [*values, 0.5 * (values[0] + values[-1]), 0.0]:
        dec = dataclasses.replace(wide, u_range=R)
        got = step_budget(spec, "squared", dec, w0, x, y, lr=LR, tol=TOL, delta=1e-9)
        _close(got, _reference(spec, "squared", dec, w0, x, y, lr=LR, tol=TOL, delta=1e-9))
        seen.add(got.u_out_of_range)
    assert len(seen) > 5  # the ranges tried cut the arguments in many ways
    # e_p(N) = 0 (ReLU, linear output, exact forward): R at an output's |p(N)|, then at a label's |y|
    spec = NetSpec(3, 3, 2, 2, activation="relu", output="linear")
    x, y, w0 = _task(spec, seed=101)
    ex = lemma1_terms(spec, "squared", w0, x, y)
    out, lab = ex.p[-1].abs().flatten(), y.abs().flatten()
    for R in (float(out.max()), float(lab.max()), float(lab.min()), 0.0):
        dec = Declared(r=(0.0, 0.0, 0.0), r_prime=(0.0, 0.0, 0.0), u=0.0, u_range=R)
        got = step_budget(spec, "squared", dec, w0, x, y, lr=LR, tol=TOL, delta=1e-9)
        assert got.u_out_of_range == int((out > R).sum()) + int((lab > R).sum())


def test_roundoff_is_gamma_of_the_longest_sum_times_the_gradient_magnitude() -> None:
    """``2 γ_k |s|^T |p| / (2n)`` with ``γ_k = k u / (1 - k u)``, ``k = n + N max(n_j) + 8``: in float32 on
    300 examples ``k u`` is 1.9e-5, so ``1 - k u`` is told from 1 or ``1 + k u``."""
    spec = NetSpec(3, 3, 2, 1, activation="tanh")
    x, y, _, w0, _ = sample_task(spec, 300, seed=100, dtype=torch.float32)
    got = step_budget(spec, "squared", SUMS, w0, x, y, lr=LR, tol=TOL, delta=1e-9)
    ex = lemma1_terms(spec, "squared", w0.double(), x.double(), y.double())
    mag = torch.cat([(s.abs().T @ p.abs()).reshape(-1) for s, p in zip(ex.s, ex.p[:-1], strict=True)]) / 600
    k, unit = 300 + 3 * 3 + 8, 2.0**-24
    assert got.roundoff == pytest.approx(2 * k * unit / (1 - k * unit) * float(mag.norm()), rel=1e-6)
    assert got.total == got.approximation + got.tolerance + got.roundoff


def test_largest_gives_the_parts_of_the_largest_budget() -> None:
    """The parts of the budget with the largest total, wherever it is in the list; a NaN or infinite total
    counts as largest (the first such); none: no parts."""

    def b(total: float, i: int) -> StepBudget:
        return StepBudget(total, 1.0 + i, 10.0 + i, 100.0 + i)

    def parts(i: int) -> dict[str, float]:
        return {"approximation": 1.0 + i, "tolerance": 10.0 + i, "round-off": 100.0 + i}

    assert largest([]) == {}
    assert largest([b(2.0, 0)]) == parts(0)
    assert largest([b(1.0, 0), b(3.0, 1), b(2.0, 2)]) == parts(1)
    assert largest([b(1.0, 0), b(2.0, 1), b(3.0, 2)]) == parts(2)
    assert largest([b(1.0, 0), b(math.nan, 1), b(2.0, 2)]) == parts(1)
    assert largest([b(1.0, 0), b(2.0, 1), b(math.inf, 2), b(math.nan, 3)]) == parts(2)


class _Matmuls(TorchFunctionMode):
    """Counts matrix products (``@``, ``torch.matmul``) formed inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in (torch.matmul, Tensor.matmul, Tensor.__matmul__):
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_an_exact_construction_forms_no_product_of_its_error_terms() -> None:
    """The paper's ReLU construction declares every error 0: with no relu' window hit every error term is
    exactly 0, so the only products formed are the gradient magnitudes ``|s|^T |p|`` (one per layer); one
    window hit makes the backward error terms of the layers it reaches non-zero, and their products are
    formed."""
    model = compile_gd_transformer(NetSpec(3, 3, 2, 1), lr=LR, steps=1, n=6, eps=1e-3, radius=10.0)
    spec, dec = model.spec, sums_only(model)
    assert dec.u == dec.forward == dec.transpose == dec.gradient == 0.0 and dec.derivative == ()
    x, y, w0 = _task(spec)
    terms = lemma1_terms(spec, "squared", w0, x, y)
    with _Matmuls() as mm:
        b = step_budget(spec, "squared", dec, w0, x, y, lr=LR, tol=TOL, delta=1e-9, terms=terms)
    assert b.approximation == 0.0 and mm.count == spec.depth
    # one window hit, at the smallest positive pre-activation, in layer L: e_s(L) > 0, then e_s(j) > 0 below
    # it through |r'(j)| e_b(j); the products E(L..1) and e_b(L-1..1) are formed (their other factor p̄'s
    # error e_p stays 0: still skipped), none above L
    mins = [float(z[z > 0].min()) for z in terms.pre]
    L = 1 + mins.index(min(mins))
    delta = math.nextafter(min(mins), math.inf)
    with _Matmuls() as mm:
        b = step_budget(spec, "squared", dec, w0, x, y, lr=LR, tol=TOL, delta=delta, terms=terms)
    assert L > 1 and b.approximation > 0.0 and mm.count == spec.depth + 2 * L - 1


def _terms(exact: bool, sup_error: float, eps: float, radius: float = 7.0) -> Terms:
    return Terms(
        a=((1.0,),),
        b=(1.0,),
        c=(1.0,),
        target="tanh",
        exact=exact,
        radius=radius,
        sup_error=sup_error,
        eps=eps,
    )


def test_a_fitted_sum_declares_its_target_eps_plus_the_sampling_margin() -> None:
    """Exact: its measured sup error; fitted: the larger of its measured error and target eps, times
    ``1 + 1e-2``; ``declared_sums`` takes each sum's error and the u sum's range (inf when exact)."""
    assert SAMPLING_MARGIN == 1e-2
    assert sum_error(_terms(True, 3e-17, 1e-3)) == 3e-17
    assert sum_error(_terms(False, 5e-4, 1e-3)) == pytest.approx(1.01e-3, rel=1e-15)
    assert sum_error(_terms(False, 2e-3, 1e-3)) == pytest.approx(2.02e-3, rel=1e-15)
    r = (_terms(False, 1e-4, 1e-3), _terms(True, 0.0, 1e-3), _terms(False, 3e-3, 2e-3))
    r_prime = (_terms(True, 1e-16, 1e-3), _terms(False, 1e-4, 4e-3), _terms(False, 0.0, 5e-3))
    dec = declared_sums(
        r,
        r_prime,
        _terms(False, 1e-4, 6e-3, radius=9.0),
        forward=1.5,
        transpose=2.5,
        gradient=3.5,
        derivative=(4.5,),
    )
    assert dec.r == pytest.approx((1.01e-3, 0.0, 3.03e-3), rel=1e-15)
    assert dec.r_prime == pytest.approx((1e-16, 4.04e-3, 5.05e-3), rel=1e-15)
    assert dec.u == pytest.approx(6.06e-3, rel=1e-15) and dec.u_range == 9.0
    assert (dec.forward, dec.transpose, dec.gradient, dec.derivative) == (1.5, 2.5, 3.5, (4.5,))
    assert dec.window_hits == 0
    exact_u = declared_sums(r, r_prime, _terms(True, 2e-16, 6e-3, radius=9.0))
    assert exact_u.u == 2e-16 and exact_u.u_range == math.inf
    assert (exact_u.forward, exact_u.transpose, exact_u.gradient, exact_u.derivative) == (0.0, 0.0, 0.0, ())
