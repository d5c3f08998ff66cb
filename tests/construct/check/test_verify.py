"""icdl.construct.check.verify: the verifier finds construction errors, and smooth constructions behave as the
paper's error analysis says (gradient error shrinks with eps; trajectory error under Corollary 1.1)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.check.verify import estimate_lipschitz, recursion
from icdl.construct.compile import sample_task_info
from icdl.nets import NetSpec, forward, gradient, lemma1_terms, reference_gd


def _setup(activation: str = "relu", eps: float = 1e-3, steps: int = 3, n: int = 8, seed: int = 0, **kw):
    spec = NetSpec(3, 4, 3, 2, activation=activation)
    x, y, xq, w0, _ = sample_task(spec, n, seed=seed)
    model = compile_gd_transformer(spec, steps=steps, n=n, eps=eps, lr=0.2, **kw)
    return model, (x, y, xq, w0)


def test_relu_report_is_exact_and_consistent() -> None:
    model, prompt = _setup(projection="box", box=0.7)
    rep = verify(model, *prompt)
    assert rep.passed and rep.first_divergence is None and rep.verdict == "PASS"
    assert rep.weights_moved > 0 and not rep.degenerate
    assert rep.delta_window_count == 0  # asserted, not assumed
    assert rep.out_of_range_count is None  # no fitted sums
    assert rep.max_sublayer_err <= 1e-12
    assert rep.max_abs_err_weights <= 1e-12 and rep.max_abs_err_prediction <= 1e-12
    assert rep.weights_spread == 0.0 and rep.scratch_max == 0.0
    assert len(rep.steps) == 3 and [s.step for s in rep.steps] == [1, 2, 3]
    assert rep.trajectory_error <= rep.corollary_bound_budget + 1e-15
    assert rep.failures == [] and rep.describe().startswith("PASS")
    assert all(s.grad_l2 <= s.budget_l2 for s in rep.steps)
    assert rep.gate_margin > 0
    d = rep.to_dict()
    json.dumps(d)  # JSON-ready
    assert d["passed"] is True and "steps" in d
    assert "first divergence: none" in rep.table()


def test_recursion_matches_lemma1() -> None:
    model, (x, y, xq, w0) = _setup()
    n = x.shape[0]
    t = torch.cat([torch.ones(n), torch.zeros(1)]).double()
    ex = recursion(
        model, w0, torch.cat([x, xq[None]]), torch.cat([y, torch.zeros(1, 2).double()]), t, surrogate=False
    )
    torch.testing.assert_close(ex.grad, gradient(model.spec, "squared", w0, x, y), rtol=0, atol=1e-15)
    ref = lemma1_terms(model.spec, "squared", w0, x, y)
    for a, b in zip(ex.s, ref.s, strict=True):
        torch.testing.assert_close(a[:n], b, rtol=0, atol=1e-15)


def test_lipschitz_estimate_matches_hessian_eigenvalue() -> None:
    """Power iteration against the exact Hessian (autograd) on a small net."""
    model, (x, y, _, w0) = _setup(activation="tanh", eps=1e-2)
    from icdl.nets import empirical_risk

    Hm = torch.autograd.functional.hessian(lambda w: empirical_risk(model.spec, "squared", w, x, y), w0)
    want = float(torch.linalg.eigvalsh(Hm).abs().max())
    got = estimate_lipschitz(model, [w0], x, y, iters=200)
    assert got == pytest.approx(want, rel=1e-3)


def _perturb_one_weight(module: torch.nn.Module, H_in: torch.Tensor) -> None:
    """Change ONE stored coefficient of ``module`` — the first one (in table order) whose change alters the
    module's output on its actual input ``H_in`` (dead ReLU units make some weights irrelevant)."""
    before = module(H_in)
    for table in module.coefficient_tables():
        flat = table.view(-1)
        for k in torch.nonzero(flat).flatten().tolist():
            old = float(flat[k])
            flat[k] = old * 1.5 + 0.25
            if not torch.equal(module(H_in), before):
                return
            flat[k] = old
    raise AssertionError("no weight of this sublayer matters on this prompt")


def _inputs(model, prompt):
    """State before every sublayer: {(step, index): H}."""
    H0 = model.build_prompt(*prompt)
    seen = {}
    prev = [H0]

    def trace(pt, H):
        seen[(pt.step, pt.index)] = prev[0]
        prev[0] = H.clone()

    model.run(H0, trace=trace)
    return seen


@pytest.mark.parametrize("index", range(10))  # every sublayer of a depth-3 block
def test_a_wrong_weight_is_named(index: int, assert_nondegenerate) -> None:
    model, prompt = _setup(seed=1, projection="box", box=0.3)
    assert_nondegenerate(model.spec, prompt[0], prompt[1], prompt[3])
    _perturb_one_weight(model.block[index], _inputs(model, prompt)[(0, index)])
    rep = verify(model, *prompt, lipschitz_iters=0)
    assert not rep.passed
    div = rep.first_divergence
    assert div is not None
    assert (div.step, div.index, div.role) == (0, index, model.block[index].info.role)
    assert div.name == model.block[index].info.name and div.kind == "finite"


def test_a_wrong_readout_weight_is_named() -> None:
    model, prompt = _setup(seed=1)
    last = len(model.readout) - 1
    _perturb_one_weight(model.readout[last], _inputs(model, prompt)[(None, last)])
    rep = verify(model, *prompt, lipschitz_iters=0)
    assert rep.first_divergence is not None
    assert rep.first_divergence.role == "readout" and rep.first_divergence.step is None
    assert rep.first_divergence.describe().startswith("readout, sublayer 4 (readout), slot Y")
    assert rep.max_abs_err_weights <= 1e-12  # the weights are still right


@pytest.mark.parametrize("activation", ["sigmoid", "tanh", "softplus"])
def test_smooth_errors_shrink_with_eps_and_stay_under_the_bound(activation: str) -> None:
    grads, trajs = [], []
    for eps in (1e-2, 1e-3, 1e-4):
        model, prompt = _setup(activation=activation, eps=eps)
        rep = verify(model, *prompt)
        # the heads compute exactly the paper's surrogate p̄, r̄', ḡ, s̄: no condition fails; at the coarse
        # eps 1e-2 the budget may be too large to certify a step (INCONCLUSIVE), from 1e-3 on it is not
        assert not rep.failures and rep.verdict == ("PASS" if eps < 1e-2 else rep.verdict)
        assert rep.verdict in ("PASS", "INCONCLUSIVE")
        assert rep.out_of_range_count == 0 and rep.delta_window_count is None
        assert rep.trajectory_error <= rep.corollary_bound_budget
        for s in rep.steps:
            assert s.grad_l2 <= s.budget_l2 and s.trajectory_l2 <= s.bound_budget_l2
        grads.append(rep.eps_grad)
        trajs.append(rep.trajectory_error)
    assert grads[0] > grads[1] > grads[2] > 0
    assert trajs[0] > trajs[2]
    assert all(math.isfinite(g) for g in grads)


def test_window_hits_are_counted() -> None:
    """Put one example's first pre-activation inside (0, delta): the report must count it."""
    model, (x, y, xq, w0) = _setup(delta=1e-6)
    spec = model.spec
    z0 = x[0] @ w0[: spec.in_dim]  # pre-activation of unit 0 of layer 1 on example 0
    x = x.clone()
    x[0] = x[0] + (5e-7 - z0) * w0[: spec.in_dim] / w0[: spec.in_dim].dot(w0[: spec.in_dim])
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.delta_window_count is not None and rep.delta_window_count >= 1
    assert rep.verdict == "FAIL" and any(f.startswith("(b) relu' window") for f in rep.failures)


def _raw_degenerate_seed(spec: NetSpec, n: int) -> int:
    """The first seed whose first draw GD never moves (checked with reference GD, not icdl's own test)."""
    for seed in range(200):
        x, y, _, w0, _ = sample_task(spec, n, seed=seed, nondegenerate=False)
        traj = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=1)
        if torch.equal(traj[1], traj[0]):
            return seed
    raise AssertionError("no degenerate first draw in 200 seeds")


def test_a_degenerate_task_is_never_a_pass(assert_nondegenerate) -> None:
    """ReLU output (the paper's network): some seeds' first draws have every unit dead, GD never moves w
    and every comparison is trivially exact. verify says DEGENERATE; sample_task redraws them."""
    spec, n = NetSpec(2, 4, 3, 1), 8
    seed = _raw_degenerate_seed(spec, n)
    model = compile_gd_transformer(spec, steps=3, n=n)
    x, y, xq, w0, _ = sample_task(spec, n, seed=seed, nondegenerate=False)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.first_divergence is None and rep.weights_moved == 0.0 and rep.degenerate
    assert rep.verdict == "DEGENERATE" and not rep.passed
    d = rep.to_dict()
    assert d["verdict"] == "DEGENERATE" and d["degenerate"] is True and d["weights_moved"] == 0.0
    assert d["passed"] is False and "DEGENERATE" in rep.table()
    task = sample_task_info(spec, n, seed=seed)
    assert task.draws > 1
    assert_nondegenerate(spec, task.x, task.y, task.w0)
    rep = verify(model, task.x, task.y, task.x_query, task.w0, lipschitz_iters=0)
    assert rep.verdict == "PASS" and rep.weights_moved > 0 and not rep.degenerate


def test_sample_task_keeps_a_seeds_first_good_draw() -> None:
    """Redrawing changes only degenerate seeds: a good first draw is returned as it is, in one draw."""
    spec, n = NetSpec(2, 4, 3, 1), 8
    bad = _raw_degenerate_seed(spec, n)
    good = next(s for s in range(bad + 1) if s != bad)
    raw = sample_task(spec, n, seed=good, nondegenerate=False)
    task = sample_task_info(spec, n, seed=good)
    assert task.draws == 1
    for a, b in zip(raw, task.astuple(), strict=True):
        assert torch.equal(a, b)
    assert len(sample_task(spec, n, seed=bad)) == 5


@pytest.mark.parametrize("variant", ["paper", "compact", "rows"])
def test_a_valid_float32_model_passes_with_default_options(variant: str) -> None:
    """verify's default tolerance follows the model's dtype (default_tol): a correct float32 construction
    passes without a tol argument, and its sublayer errors are float32 round-off, far above float64's."""
    from icdl.construct.compile import default_tol

    spec, n = NetSpec(2, 3, 3, 1), 6
    x, y, xq, w0, _ = sample_task(spec, n, seed=4)
    m32 = compile_gd_transformer(spec, steps=2, n=n, lr=0.1, dtype="float32", variant=variant)
    rep = verify(m32, x, y, xq, w0)
    assert rep.verdict == "PASS", rep.table()
    assert rep.tol == default_tol("float32") == 1e-4 and default_tol("float64") == 1e-9
    assert 1e-9 < rep.max_sublayer_err <= 1e-4  # would FAIL at the float64 tolerance
    assert verify(m32, x, y, xq, w0, tol=1e-9, lipschitz_iters=0).verdict == "FAIL"


def test_prediction_error_at_own_weights_uses_the_transformers_weights() -> None:
    """``max_abs_err_prediction_own_w`` is the readout's error alone: the prediction against the exact
    network at the weights the transformer itself reached (not at reference GD's). An approximate variant
    (softmax products, tanh) ends at weights measurably off GD's, so the two errors differ."""
    spec = NetSpec(2, 3, 2, 1, activation="tanh")
    x, y, xq, w0, _ = sample_task(spec, 6, seed=0)
    model = compile_gd_transformer(spec, steps=3, n=6, eps=1e-1, lr=0.2, radius=4.0, variant="softmax")
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    out = model(model.build_prompt(x, y, xq, w0))
    pred, w_tf = model.read_prediction(out)[0], model.read_weights(out)[0]
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.2, steps=3)
    f_own, f_gd = forward(spec, w_tf, xq[None])[0], forward(spec, ref[-1], xq[None])[0]
    assert float((ref[-1] - ref[0]).abs().max()) > 1e-3  # GD moves
    assert float((f_own - f_gd).abs().max()) > 1e-3  # own and GD weights predict measurably differently
    assert rep.max_abs_err_prediction_own_w == pytest.approx(float((pred - f_own).abs().max()), rel=1e-9)
    assert rep.max_abs_err_prediction == pytest.approx(float((pred - f_gd).abs().max()), rel=1e-9)


@pytest.mark.parametrize("variant", ["paper", "rows"])
def test_relu_window_counts_the_step_start_weights_only(variant: str) -> None:
    """The relu' window (0, δ) is counted at the weights each GD step starts from, not at the readout's
    final weights: the readout computes r only (F_1..F_N and the readout MLP), so a final pre-activation
    in the window, or beyond the step's float limit, changes nothing the transformer computes."""
    spec = NetSpec(2, 6, 3, 1)
    n, lr, delta = 16, 0.5, 0.3
    x, y, xq, w0, _ = sample_task(spec, n, seed=2)

    def hits(w: torch.Tensor) -> int:
        pre = lemma1_terms(spec, "squared", w, x, y).pre
        return sum(int(((z > 0) & (z < delta)).sum()) for z in pre)

    model = compile_gd_transformer(spec, steps=1, n=n, lr=lr, delta=delta, variant=variant)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    # GD's final weights (the transformer's own differ inside the window, but also have hits there)
    w1 = reference_gd(spec, "squared", w0, x, y, lr=lr, steps=1)[1]
    assert hits(w0) > 0 and hits(w1) > 0  # both points have pre-activations in the window
    assert rep.delta_window_count == hits(w0)
