"""Tests of icdl.theory: sizes against hand counts and the paper's special cases, bounds against direct
simulation of the perturbed network, monotonicity, Corollary 1.1 against its recursion, FLOPs against hand
counts, torch's FLOP counter and the paper's 3.3e9 / 7.6e9 figures."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from icdl import theory as th
from icdl.errors import InputError
from icdl.nets import ACTIVATIONS, NetSpec
from icdl.sublayer import SublayerInfo

SPECS = [
    NetSpec(2, 1, 1, 1),
    NetSpec(3, 5, 4, 2),
    NetSpec(4, 3, 2, 5),
    NetSpec(5, 7, 3, 3, output="linear"),
    NetSpec(2, 4, 6, 1, activation="identity"),
]


def _relu_terms(spec: NetSpec) -> th.TermCounts:
    return th.term_counts(spec, "squared")


# ------------------------------------------------------------------------------------------------
# Depth and embedding dimension
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("N,L", [(2, 1), (3, 4), (6, 10), (10, 0)])
def test_sublayer_counts(N: int, L: int) -> None:
    assert th.sublayers_per_step(N) == 2 * N + 4
    assert th.sublayers(N, L) == (2 * N + 4) * L
    assert th.readout_sublayers(N) == N + 1


@pytest.mark.parametrize("bad", [1, 0, -3, 2.5, True])
def test_depth_below_two_rejected(bad: object) -> None:
    with pytest.raises(InputError):
        th.sublayers_per_step(bad)  # type: ignore[arg-type]


def _slot_sizes(spec: NetSpec) -> dict[str, int]:
    """Token layout of docs/paper.md, slot by slot (independent of embedding_dim's formula)."""
    w = spec.widths
    slots = {"X": spec.in_dim, "Y": spec.out_dim, "W": sum(a * b for a, b in zip(w[1:], w[:-1], strict=True))}
    for j in range(1, spec.depth + 1):
        slots[f"P{j}"] = w[j]
        slots[f"R{j}"] = w[j]
        slots[f"S{j}"] = w[j]
    slots.update(G=spec.out_dim, ONE=1, T=1)
    return slots


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_embedding_dim_is_sum_of_slots(spec: NetSpec) -> None:
    assert th.embedding_dim(spec) == sum(_slot_sizes(spec).values())
    assert th.embedding_dim_as_printed(spec) == th.embedding_dim(spec) - spec.width


def test_embedding_dim_prototype_numbers() -> None:
    # docs/paper.md, token layout: the numpy prototype with N=3, d_x=4, K=5, d_y=2 had D = 101 and P = 55.
    spec = NetSpec(3, 5, 4, 2)
    assert spec.num_params == 55
    assert th.embedding_dim(spec) == 101


@pytest.mark.parametrize("N,K,d", list(itertools.product([2, 3, 4, 7], [1, 2, 5, 16], [1, 3, 8])))
def test_embedding_dim_closed_form_and_D_N(N: int, K: int, d: int) -> None:
    spec = NetSpec(N, K, d, d)
    D = th.embedding_dim(spec)
    assert 6 * d + 2 * d * K + (N - 2) * K**2 + 3 * (N - 1) * K + 2 == D
    assert th.embedding_dim_closed_form(N, K, d) == D
    assert spec.num_params == 2 * d * K + (N - 2) * K**2  # D_N (Definition 2)
    # NK^2 + 3NK are the leading terms; the remainder is exactly 2dK - 2K^2 - 3K + 6d + 2.
    assert D - th.embedding_dim_leading_terms(spec) == 2 * d * K - 2 * K**2 - 3 * K + 6 * d + 2
    assert th.embedding_dim_paper_bound(spec) == N * K**2 + spec.num_params


def test_embedding_dim_order_matches_paper_bound() -> None:
    # D = Theta(N K^2 + D_w): the ratio to NK^2 + D_w tends to (N-2)/(2N-2) in [1/3, 1/2) for N >= 4.
    ratios = [
        th.embedding_dim(NetSpec(N, K, 3, 3)) / th.embedding_dim_paper_bound(NetSpec(N, K, 3, 3))
        for N in (4, 16, 64)
        for K in (8, 64, 256)
    ]
    assert min(ratios) > 0.3 and max(ratios) < 1.0
    assert ratios[-1] == pytest.approx(62 / 126, rel=0.02)


# ------------------------------------------------------------------------------------------------
# Term counts and the size table
# ------------------------------------------------------------------------------------------------


def test_term_counts_exact_cases() -> None:
    spec = NetSpec(3, 4, 2, 3)
    tc = th.term_counts(spec)
    assert tc.r == (1, 1, 1) and tc.r_prime == (2, 2, 2) and tc.u == (2, 2, 2)
    lin = th.term_counts(NetSpec(3, 4, 2, 3, output="linear"))
    assert lin.r == (1, 1, 2) and lin.r_prime == (2, 2, 1)
    sig = th.term_counts(
        NetSpec(3, 4, 2, 3, activation="sigmoid", output="linear"), r_terms=40, r_prime_terms=50
    )
    assert sig.r == (40, 40, 2) and sig.r_prime == (50, 50, 1)
    log = th.term_counts(spec, "logistic", u_terms=7)
    assert log.u == (7, 7, 7)


def test_term_counts_missing_raise() -> None:
    with pytest.raises(InputError, match="not an exact ReLU sum"):
        th.term_counts(NetSpec(2, 3, 1, 1, activation="tanh"))
    with pytest.raises(InputError, match="u_terms"):
        th.term_counts(NetSpec(2, 3, 1, 1), "huber")
    with pytest.raises(InputError):
        th.term_counts(NetSpec(2, 3, 1, 1), "nope")
    with pytest.raises(InputError):
        th.TermCounts((1,), (2, 2), (2,)).check(NetSpec(2, 3, 1, 1))
    with pytest.raises(InputError):
        th.TermCounts((1, 0), (2, 2), (2,)).check(NetSpec(2, 3, 1, 1))


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("projection", ["none", "box"])
def test_block_table_structure(spec: NetSpec, projection: str) -> None:
    tc = _relu_terms(spec)
    rows = th.block_table(spec, tc, projection)  # type: ignore[arg-type]
    N, w, units, P, dy = spec.depth, spec.widths, spec.num_units, spec.num_params, spec.out_dim
    assert len(rows) == th.sublayers_per_step(N)
    names = [f"forward_{j}" for j in range(1, N + 1)] + ["derivative", "loss"]
    names += [f"backward_{j}" for j in range(N, 0, -1)] + ["update", "project"]
    assert [r.name for r in rows] == names
    roles = ["forward"] * N + ["derivative", "loss"] + ["backward"] * N + ["update", "project"]
    kinds = ["relu_attention"] * (N + 1) + ["mlp"] + ["ewml"] * N + ["relu_attention", "mlp"]
    assert [r.role for r in rows] == roles
    assert [r.kind for r in rows] == kinds
    assert [r.layer for r in rows[:N]] == list(range(1, N + 1))
    assert [r.layer for r in rows[N + 2 : 2 * N + 2]] == list(range(N, 0, -1))  # backward j = N..1
    for j in range(1, N + 1):
        assert rows[j - 1].heads == w[j] * tc.r[j - 1]
        assert rows[2 * N + 2 - j].heads == w[j]
    assert rows[N].heads == sum(w[j] * tc.r_prime[j - 1] for j in range(1, N + 1))
    assert rows[N + 1].hidden == sum(tc.u) == 2 * dy
    assert rows[2 * N + 2].heads == 2 * units
    box = 2 * P if projection == "box" else 0
    assert rows[2 * N + 3].hidden == box + 2 * (3 * units + dy)
    for r in rows:  # attention/EWML have heads and no hidden width; MLPs the reverse
        assert (r.heads > 0) == (r.kind != "mlp") and (r.hidden > 0) == (r.kind == "mlp")


def test_block_table_relu_hand_count() -> None:
    # N=3, K=5, d_x=4, d_y=2 (docs/paper.md, sublayers): K or d_y heads per forward layer,
    # 2((N-1)K + d_y) = 24 for the derivative and the update layer.
    spec = NetSpec(3, 5, 4, 2)
    heads = [r.heads for r in th.block_table(spec, _relu_terms(spec))]
    assert heads == [5, 5, 2, 24, 0, 2, 5, 5, 24, 0]
    assert th.max_heads(spec, _relu_terms(spec)) == 24


def test_block_table_smooth_heads_scale_with_terms() -> None:
    spec = NetSpec(3, 4, 2, 1, activation="sigmoid")
    tc = th.term_counts(spec, r_terms=42, r_prime_terms=43)
    rows = th.block_table(spec, tc)
    assert [r.heads for r in rows[:3]] == [4 * 42, 4 * 42, 1 * 42]
    assert rows[3].heads == 43 * spec.num_units
    assert th.max_heads(spec, tc) == 43 * spec.num_units


def test_readout_table() -> None:
    spec = NetSpec(4, 3, 2, 5)
    tc = _relu_terms(spec)
    ro = th.readout_table(spec, tc)
    assert len(ro) == th.readout_sublayers(4)
    assert ro[:-1] == th.block_table(spec, tc)[:4]
    assert ro[-1].role == "readout" and ro[-1].kind == "mlp" and ro[-1].hidden == 2 * 5


def test_bad_projection() -> None:
    spec = NetSpec(2, 2, 1, 1)
    with pytest.raises(InputError):
        th.block_table(spec, _relu_terms(spec), "ball")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# Bounds: B_r, Lemma 2 (simulated), Lemmas 3, 4, 6, Theorem 1
# ------------------------------------------------------------------------------------------------


def test_activation_bounds_hand_values() -> None:
    spec = NetSpec(3, 4, 2, 2)
    ab = th.activation_bounds(spec, bound_x=1.5, bound_v=2.0)
    assert ab.B_r == pytest.approx((1.5, 3.0, 6.0, 12.0))  # relu: B_r^j = B_v^j B_x
    assert ab.B_r_prime == pytest.approx((1.5, 1.0, 1.0, 1.0))
    assert ab.max_r == pytest.approx(12.0) and ab.max_r_prime == 1.0
    cor = th.activation_bounds(spec, bound_x=1.5, bound_v=2.0, corrected=True)
    assert cor.B_r == pytest.approx(
        (1.5, 3.0, 3.0 * 2 * 2, 3.0 * 2 * 2 * 2 * 2)
    )  # sqrt(K) = 2 per layer j >= 2
    sig = th.activation_bounds(NetSpec(2, 3, 1, 1, activation="sigmoid"), bound_x=1.0, bound_v=3.0)
    s = 1 / (1 + math.exp(-3.0))
    assert sig.B_r[1] == pytest.approx(s)
    assert sig.B_r[2] == pytest.approx(1 / (1 + math.exp(-3.0 * s)))
    assert sig.B_r_prime[1] == pytest.approx(0.25)  # sigmoid' peaks at 0


def test_printed_B_r_misses_sqrtK_but_corrected_holds() -> None:
    # docs/paper.md, erratum E13: B_r^{j-1} bounds entries, |v^T p| <= B_v ||p||_2 needs the norm.
    K = 9
    spec = NetSpec(2, K, 1, 1)
    V1 = torch.ones(K, 1, dtype=torch.float64)  # ||v_1k|| = 1
    V2 = torch.ones(1, K, dtype=torch.float64) / math.sqrt(K)  # ||v_21|| = 1
    x = torch.ones(1, dtype=torch.float64)  # ||x|| = 1
    out = torch.relu(V2 @ torch.relu(V1 @ x)).item()
    assert out == pytest.approx(math.sqrt(K))
    assert out > th.activation_bounds(spec, bound_x=1, bound_v=1).B_r[2] * 1.5
    assert out <= th.activation_bounds(spec, bound_x=1, bound_v=1, corrected=True).B_r[2] + 1e-12


def _random_net(spec: NetSpec, bound_v: float, gen: torch.Generator) -> list[torch.Tensor]:
    Vs = []
    for rows, cols in spec.shapes:
        V = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
        Vs.append(V / V.norm(dim=1, keepdim=True) * bound_v)  # every row on the sphere ||v_jk|| = B_v
    return Vs


@pytest.mark.parametrize(
    "spec", [NetSpec(3, 4, 3, 3, "sigmoid"), NetSpec(4, 3, 2, 3, "tanh"), NetSpec(2, 6, 5, 2)]
)
def test_lemma2_bound_holds_in_simulation(spec: NetSpec) -> None:
    # p̄(j) = r̄(V_j p̄(j-1)) with a worst-ish perturbation |r̄ - r| <= eps_r; Lemma 2 says
    # ||p̄(j) - p(j)||_2 <= factor_j * eps_r.
    gen = torch.Generator().manual_seed(0)
    eps_r, bound_v = 1e-3, 1.3
    act = ACTIVATIONS[spec.activation]
    factors = th.lemma2_layer_factors(spec, lipschitz_r=act.lipschitz, bound_v=bound_v)
    worst = [0.0] * spec.depth
    for _ in range(50):
        Vs = _random_net(spec, bound_v, gen)
        x = torch.randn(spec.in_dim, generator=gen, dtype=torch.float64)
        p, pb = x, x
        for j, V in enumerate(Vs):
            p = act.fn(V @ p)
            z = V @ pb
            pb = act.fn(z) + eps_r * torch.sign(torch.sin(31 * z) + 0.5)
            worst[j] = max(worst[j], float((pb - p).norm()) / eps_r)
    for j in range(spec.depth):
        assert worst[j] <= factors[j] * (1 + 1e-9)
    assert worst[0] == pytest.approx(factors[0])  # layer 1 is tight: every entry off by exactly eps_r
    assert th.lemma2_E_r(spec, lipschitz_r=act.lipschitz, bound_v=bound_v) == max(factors)


def test_lemma2_hand_values() -> None:
    # N=3, K=4, d_y=9, L_r B_v = 1: q = 2; factors 1*2, (1+2)*2, (1+2+4)*3.
    f = th.lemma2_layer_factors(NetSpec(3, 4, 1, 9), lipschitz_r=1.0, bound_v=1.0)
    assert f == pytest.approx((2.0, 6.0, 21.0))
    assert th.lemma3_error(
        eps_r_prime=0.1, eps_r=0.01, lipschitz_r_prime=2, bound_v=3, E_r=4
    ) == pytest.approx(0.1 + 2 * 3 * 4 * 0.01)
    assert th.lemma4_error(eps_l=0.1, eps_r=0.01, lipschitz_l=2, E_r=4) == pytest.approx(0.1 + 0.08)
    # exact forward (eps_r = 0) kills the infinite Lipschitz constant of relu'
    assert th.lemma3_error(eps_r_prime=0.0, eps_r=0.0, lipschitz_r_prime=math.inf, bound_v=1, E_r=2) == 0.0


def test_loss_derivative_bound() -> None:
    assert th.loss_derivative_bound("squared", bound_t=1.5, bound_y=2.0) == pytest.approx(7.0)
    assert th.loss_derivative_bound("huber", bound_t=5, bound_y=5) == pytest.approx(2.0)
    assert th.loss_derivative_bound("logistic", bound_t=3, bound_y=1) == pytest.approx(
        1 / (1 + math.exp(-3)), rel=1e-6
    )


def test_lemma6_and_theorem1_hand_case() -> None:
    # N=2, K=d=1 and every constant 1: x = 1, B_s = 1, E_s^r = max(1*1 + 1*2, 0 + 2) = 3,
    # E_s^r' = max(1 + 1, 0 + 1) = 2, E_s^l = 1; E_r = 2.
    spec = NetSpec(2, 1, 1, 1)
    E_r = th.lemma2_E_r(spec, lipschitz_r=1.0, bound_v=1.0)
    assert E_r == 2.0
    l6 = th.lemma6_constants(
        spec, E_r=1.0, B_r_prime=1.0, B_l=1.0, bound_v=1.0, lipschitz_r_prime=1.0, lipschitz_l=1.0
    )
    assert (l6.P, l6.B_s, l6.E_s_r, l6.E_s_r_prime, l6.E_s_l) == (1.0, 1.0, 3.0, 2.0, 1.0)
    t1 = th.theorem1_constants(spec, l6, B_r=1.0, E_r=E_r)
    # C_l = N P^1.5 B_r E_s^l = 2; C_r = 2*3 + N P B_s E_r = 6 + 4; C_r' = 2*2.
    assert (t1.C_l, t1.C_r, t1.C_r_prime) == (2.0, 10.0, 4.0)
    assert l6.error(eps_r=0.1, eps_r_prime=0.2, eps_l=0.3) == pytest.approx(0.3 + 0.4 + 0.3)


@pytest.mark.parametrize("eps", [1e-6, 1e-3, 0.5])
def test_theorem1_split_meets_eps(eps: float) -> None:
    spec = NetSpec(3, 4, 2, 2, "sigmoid")
    l6 = th.lemma6_constants(
        spec, E_r=3.0, B_r_prime=0.25, B_l=4.0, bound_v=2.0, lipschitz_r_prime=0.1, lipschitz_l=2
    )
    t1 = th.theorem1_constants(spec, l6, B_r=1.0, E_r=3.0)
    split = t1.split(eps)
    assert t1.grad_error(**split) == pytest.approx(eps)
    # each of the three parts is eps/3
    assert t1.C_l * split["eps_l"] / 2 == pytest.approx(eps / 3)
    # and the C-form equals the (C.7) form written out
    e6 = l6.E_s_r * split["eps_r"] + l6.E_s_r_prime * split["eps_r_prime"] + l6.E_s_l * split["eps_l"]
    c7 = spec.depth / 2 * l6.P * (e6 * math.sqrt(l6.P) * 1.0 + l6.B_s * 3.0 * split["eps_r"])
    assert c7 == pytest.approx(eps)
    with pytest.raises(InputError):
        t1.split(0.0)


def _all_constants(N: int, bound_v: float = 2.0) -> tuple[float, ...]:
    spec = NetSpec(N, 3, 2, 2, "sigmoid")
    E_r = th.lemma2_E_r(spec, lipschitz_r=0.25, bound_v=bound_v)
    l6 = th.lemma6_constants(
        spec, E_r=E_r, B_r_prime=0.5, B_l=3.0, bound_v=bound_v, lipschitz_r_prime=0.1, lipschitz_l=2
    )
    t1 = th.theorem1_constants(spec, l6, B_r=1.0, E_r=E_r)
    return (E_r, l6.B_s, l6.E_s_r, l6.E_s_r_prime, l6.E_s_l, t1.C_l, t1.C_r, t1.C_r_prime)


def test_bounds_grow_with_depth() -> None:
    # x = B_r' B_v P = 0.5 * 2 * sqrt(3) > 1: Lemma 6 constants grow (exponentially) with N.
    seq = [_all_constants(N) for N in range(2, 8)]
    for a, b in itertools.pairwise(seq):
        assert all(bi > ai for ai, bi in zip(a, b, strict=True))
    x = 0.5 * 2 * math.sqrt(3)
    assert seq[-1][1] / seq[-2][1] == pytest.approx(x)  # B_s ~ x^{N-1}


def test_relu_constants_are_infinite_but_split_is_exact() -> None:
    spec = NetSpec(3, 2, 2, 2)
    l6 = th.lemma6_constants(
        spec, E_r=2.0, B_r_prime=1.0, B_l=4.0, bound_v=1.0, lipschitz_r_prime=math.inf, lipschitz_l=2
    )
    assert math.isinf(l6.E_s_r) and math.isfinite(l6.E_s_r_prime)
    t1 = th.theorem1_constants(spec, l6, B_r=1.0, E_r=2.0)
    assert math.isinf(t1.C_r) and t1.split(1e-3)["eps_r"] == 0.0
    assert t1.grad_error(eps_r=0.0, eps_r_prime=0.0, eps_l=0.0) == 0.0


# ------------------------------------------------------------------------------------------------
# Corollary 1.1
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lr,Lf,eps,steps", [(0.1, 1.0, 1e-3, 5), (0.5, 3.0, 0.2, 12), (1e-3, 10.0, 1.0, 1)])
def test_corollary_matches_worst_case_recursion(lr: float, Lf: float, eps: float, steps: int) -> None:
    # e_l = (1 + eta L_f) e_{l-1} + eta eps, e_0 = 0: attained by f(w) = -(L_f/2) w^2 (gradient
    # -L_f w, L_f-Lipschitz) with a perturbation of size eta*eps pushing the same way each step.
    w_gd, w_bar = 0.0, 0.0
    for _ in range(steps):
        w_gd = w_gd + lr * Lf * w_gd
        w_bar = w_bar + lr * Lf * w_bar + lr * eps
    bound = th.corollary11_bound(eps=eps, lr=lr, lipschitz_f=Lf, steps=steps)
    assert abs(w_bar - w_gd) == pytest.approx(bound)
    assert bound <= th.corollary11_loose(eps=eps, lr=lr, lipschitz_f=Lf, steps=steps)


@pytest.mark.parametrize("n", [1, 2, 10, 1000])
@pytest.mark.parametrize("steps", [1, 3, 20])
def test_corollary_corrected_below_printed_when_eta_below_n(n: int, steps: int) -> None:
    for lr in (0.01, 0.5, 0.99 * n):
        assert th.corollary11_bound(
            eps=1e-3, lr=lr, lipschitz_f=2.0, steps=steps
        ) <= th.corollary11_as_printed(eps=1e-3, examples=n, lipschitz_f=2.0, steps=steps)
    # the printed form is the corrected "loose" form with n in place of eta
    assert th.corollary11_as_printed(eps=1e-3, examples=n, lipschitz_f=2.0, steps=steps) == pytest.approx(
        th.corollary11_loose(eps=1e-3, lr=float(n), lipschitz_f=2.0, steps=steps)
    )


def test_corollary_bad_input() -> None:
    with pytest.raises(InputError):
        th.corollary11_bound(eps=1e-3, lr=0.1, lipschitz_f=0.0, steps=2)
    with pytest.raises(InputError):
        th.corollary11_as_printed(eps=1e-3, examples=0, lipschitz_f=1.0, steps=2)


# ------------------------------------------------------------------------------------------------
# FLOPs
# ------------------------------------------------------------------------------------------------


def test_model_flops_hand_count() -> None:
    # N=2, K=d_x=d_y=1, relu, n=1 (T=2), L=2. D = 1 + 2 + 2 + 6 + 2 = 13.
    spec = NetSpec(2, 1, 1, 1)
    assert th.embedding_dim(spec) == 13
    T, D = 2, 13
    f1 = f2 = 2 * T * T * (2 + 1)  # 1 head, d_q = n_0 + 1 = 2, d_v = 1
    der = 2 * T * T * (4 * 2 + 4)  # 2 r'-terms x 2 units, d_q = 2 each
    loss = 2 * D * 2 * 2 * T  # hidden 2
    e2 = e1 = 2 * T * (1 + 1)
    upd = 2 * T * T * (4 + 2 * 2)  # 4 heads with d_q = 1, values 2P = 4
    proj = 2 * D * (2 * (3 * 2 + 1)) * 2 * T
    per_block = f1 + f2 + der + loss + e2 + e1 + upd + proj
    readout = f1 + f2 + 2 * D * 2 * 2 * T
    got = th.model_flops(spec, th.term_counts(spec), examples=1, steps=2)
    assert got == {
        "per_block": per_block,
        "blocks": 2 * per_block,
        "readout": readout,
        "total": 2 * per_block + readout,
    }
    assert per_block == 1888 and readout == 256


def test_sublayer_flops_match_torch_counter() -> None:
    # The convention (2 FLOPs per MAC) agrees with torch's counter on explicit dense implementations.
    T, D = 6, 11
    att = SublayerInfo(
        "update", "update", "relu_attention", "x", None, heads=3, hidden=0, score_dim=7, value_dim=5
    )
    q, k = torch.randn(T, 7), torch.randn(T, 7)  # all heads' query/key coordinates side by side
    v = torch.randn(T, 5)
    with FlopCounterMode(display=False) as fc:
        # per head h: scores q_h k_h^T; concatenating heads sums their d_q; same for values
        torch.relu(q @ k.T) @ v
    assert fc.get_total_flops() == att.flops(T, D)
    mlp = SublayerInfo("project", "project", "mlp", "x", None, heads=0, hidden=9, score_dim=0, value_dim=0)
    h, W1, W2 = torch.randn(T, D), torch.randn(D, 9), torch.randn(9, D)
    with FlopCounterMode(display=False) as fc:
        torch.relu(h @ W1) @ W2
    assert fc.get_total_flops() == mlp.flops(T, D)


def test_direct_gd_flops_forward_part_matches_counter() -> None:
    # 6 P n L = (2 forward + 4 backward) FLOPs per parameter per example per step; check the forward 2Pn.
    spec, n = NetSpec(3, 5, 4, 2), 7
    x = torch.randn(n, 4)
    Vs = [torch.randn(*s) for s in spec.shapes]
    with FlopCounterMode(display=False) as fc:
        p = x
        for V in Vs:
            p = torch.relu(p @ V.T)
    assert fc.get_total_flops() == 2 * spec.num_params * n
    assert th.direct_gd_flops(spec, examples=n, steps=3) == 3 * 3 * fc.get_total_flops()


def test_paper_flop_numbers() -> None:
    # docs/protocol.md, FLOPs: "3.3 billion vs 7.6 billion FLOPs".
    icl = th.transformer_forward_flops(22e6, 76)
    net = NetSpec(6, 200, 20, 20)  # 20 -> 200 x5 -> 20, bias-free
    assert net.num_params == 168_000
    direct = th.training_flops(net.num_params, 75 * 100)
    assert round(icl / 1e9, 1) == 3.3
    assert round(direct / 1e9, 1) == 7.6
    assert icl < direct


def test_paper_asymptotic_flops_scaling() -> None:
    base = th.paper_construction_flops(examples=10, steps=2, depth=3, width=4, eps=0.1)
    assert base == pytest.approx(10 * 2 * 27 * 4**5 / 0.01)
    assert th.paper_construction_flops(examples=10, steps=2, depth=3, width=8, eps=0.1) == pytest.approx(
        32 * base
    )
    assert th.paper_construction_flops(examples=10, steps=2, depth=3, width=4, eps=0.05) == pytest.approx(
        4 * base
    )
    assert th.paper_direct_flops(examples=10, steps=2, depth=3, width=4) == 10 * 2 * 3 * 16
    with pytest.raises(InputError):
        th.paper_construction_flops(examples=10, steps=2, depth=3, width=4, eps=0.0)


def test_compiled_flops_grow_with_size() -> None:
    def total(N: int, K: int, n: int) -> int:
        spec = NetSpec(N, K, 3, 2)
        return th.model_flops(spec, th.term_counts(spec), examples=n, steps=2)["total"]

    assert total(3, 4, 5) < total(4, 4, 5) < total(4, 8, 5) < total(4, 8, 9)


def test_theory_names_no_construction_variant() -> None:
    """icdl.theory keeps the paper's formulas; a variant's sizes live with the variant (Variant.sizes)."""
    import inspect
    import re

    from icdl.construct.variants.registry import VARIANTS

    src = inspect.getsource(th)
    for name in VARIANTS:
        if name == "paper":  # the paper's construction is what the formulas describe
            continue
        ident = name.replace("-", "_")
        assert f'"{name}"' not in src and f"'{name}'" not in src, name
        assert f"--variant {name}" not in src, name
        assert re.search(rf"\b{ident}_\w*\s*\(", src) is None, name
