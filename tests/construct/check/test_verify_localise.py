"""Trust in the checker: the verifier names the right sublayer for NaN, inf and finite errors, counts only
the examples in the relu' window, and the readout is checked with a clearly negative prediction."""

from __future__ import annotations

import json
import math

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.nets import NetSpec, forward, lemma1_terms, reference_gd


def _setup(**kw):
    spec = NetSpec(2, 3, 3, 2)
    n = 6
    x, y, xq, w0, _ = sample_task(spec, n, seed=1)
    model = compile_gd_transformer(spec, steps=2, n=n, lr=0.2, projection="box", box=0.5, **kw)
    return model, (x, y, xq, w0)


def _inputs(model, prompt) -> dict:
    """State before every sublayer of step 0: {index: H}."""
    H0 = model.build_prompt(*prompt)
    seen: dict = {}
    prev = [H0]

    def trace(pt, H):
        if pt.step == 0:
            seen[pt.index] = prev[0]
        prev[0] = H.clone()

    model.run(H0, trace=trace)
    return seen


def _plant(module: torch.nn.Module, H_in: torch.Tensor, value: float) -> None:
    """Set the first stored coefficient (table order) whose change alters the module's output on ``H_in``
    to ``value`` (a finite ``value`` replaces ``c`` by ``1.5 c + value``)."""
    before = module(H_in)
    for table in module.coefficient_tables():
        flat = table.view(-1)
        for k in torch.nonzero(flat).flatten().tolist():
            old = float(flat[k])
            flat[k] = value if not math.isfinite(value) else old * 1.5 + value
            after = module(H_in)
            if not torch.equal(after, before) and not (after.isnan() & before.isnan()).all():
                return
            flat[k] = old
    raise AssertionError("no weight of this sublayer matters on this prompt")


def _writes(info) -> set[str]:
    """Slot labels a sublayer writes, with the W blocks W[V_j] folded into W."""
    return {"W" if w.startswith("W[") else w for w in info.writes}


N_BLOCK = 2 * 2 + 4


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.25], ids=["nan", "inf", "finite"])
@pytest.mark.parametrize("index", range(N_BLOCK))
def test_a_planted_value_is_named_with_its_sublayer_and_slot(
    index: int, value: float, assert_nondegenerate
) -> None:
    model, prompt = _setup()
    assert_nondegenerate(model.spec, prompt[0], prompt[1], prompt[3])
    assert len(model.block) == N_BLOCK
    _plant(model.block[index], _inputs(model, prompt)[index], value)
    rep = verify(model, *prompt, lipschitz_iters=0)
    div = rep.first_divergence
    assert div is not None and not rep.passed
    info = model.block[index].info
    assert (div.step, div.index, div.name) == (0, index, info.name)
    assert div.slot in _writes(info)  # the slot this sublayer writes, not the first slot of the token
    if math.isnan(value):
        assert div.kind == "nan" and "NaN" in div.describe()
    elif math.isinf(value):
        assert div.kind in ("inf", "nan") and div.kind != "finite"  # inf * 0 can make NaN downstream
        assert ("inf" in div.describe()) or ("NaN" in div.describe())
    else:
        assert div.kind == "finite" and math.isfinite(div.error) and div.error > 0


def test_a_nan_in_the_prompt_only_slot_is_reported_as_nan() -> None:
    """A NaN that the reference does not have is a divergence even when every finite error is 0."""
    from icdl.construct.check.stream import slot_error

    got = torch.zeros(3, 4, dtype=torch.float64)
    got[1, 2] = math.nan
    e = slot_error("P_1", got, torch.zeros_like(got))
    assert e.kind == "nan" and math.isnan(e.rel) and not e.rel <= 1e-9
    got[1, 2] = -math.inf
    assert slot_error("P_1", got, torch.zeros_like(got)).kind == "inf"


def test_query_inside_the_relu_window_is_not_counted() -> None:
    """Only the examples' pre-activations can make a ReLU construction differ from GD (the query's u is 0),
    so a query pre-activation inside (0, delta) must not be counted; an independent count over the examples
    along the GD trajectory gives the expected number."""
    spec = NetSpec(3, 4, 3, 2)
    n, steps, delta = 8, 3, 1e-6
    x, y, xq, w0, _ = sample_task(spec, n, seed=0)
    v = w0[: spec.in_dim]  # row 0 of V_1: unit 0 of layer 1
    xq = xq + (5e-7 - xq @ v) * v / v.dot(v)  # the query's first pre-activation at w0 is 5e-7
    model = compile_gd_transformer(spec, steps=steps, n=n, lr=0.2, delta=delta)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)

    traj = reference_gd(spec, "squared", w0, x, y, lr=0.2, steps=steps)

    def hits(w: torch.Tensor, inputs: torch.Tensor) -> int:
        zeros = torch.zeros(inputs.shape[0], spec.out_dim, dtype=inputs.dtype)
        return sum(
            int(((z > 0) & (z < delta)).sum()) for z in lemma1_terms(spec, "squared", w, inputs, zeros).pre
        )

    assert hits(w0, xq[None]) >= 1  # the planted query hit is really there
    assert rep.delta_window_count == sum(hits(w, x) for w in traj)  # steps 1..L and the readout


def test_readout_of_a_clearly_negative_prediction() -> None:
    """With a linear output layer the prediction can be negative: the readout's negative half is checked."""
    spec = NetSpec(3, 4, 3, 2, output="linear")
    n, steps = 7, 2
    x, y, xq, w0, _ = sample_task(spec, n, seed=4)
    y = -(y.abs() + 1.0)  # clearly negative labels: GD pulls the prediction below 0
    w0 = w0.clone()
    last = spec.offsets[-1]
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=steps)
    pred = forward(spec, ref[-1], xq[None])[0]
    # make the query's prediction clearly negative in every coordinate: flip rows of V_N where needed
    rows, cols = spec.shapes[-1]
    for k in range(rows):
        if pred[k] > 0:
            w0[last + k * cols : last + (k + 1) * cols] *= -1
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=steps)
    want = forward(spec, ref[-1], xq[None])[0]
    assert float(want.max()) < 0 and float(want.min()) < -0.5, want  # the premise of the test
    model = compile_gd_transformer(spec, steps=steps, n=n, lr=0.1)
    got = model.read_prediction(model(model.build_prompt(x, y, xq, w0)))[0]
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.passed and rep.max_abs_err_prediction <= 1e-12


# -- tests added for survivors of the mutation run (docs/testing.md) ------------------------------------


def test_a_small_error_is_caught_at_the_default_tolerance() -> None:
    """A 1e-7 relative change of one head's output weight is 100x above tol = 1e-9: it must be named."""
    model, prompt = _setup()
    fwd = model.block[0]
    fwd.v_coef.view(-1)[0] *= 1 + 1e-7
    rep = verify(model, *prompt, lipschitz_iters=0)
    div = rep.first_divergence
    assert div is not None and (div.step, div.name, div.slot) == (0, "forward_1", "P_1")
    assert 1e-9 < div.error < 1e-5


def test_a_write_into_a_slot_no_effect_names_is_caught() -> None:
    """Slots a sublayer's expected effects do not name must keep their value: an extra head of F_1 that adds
    1 to Y[0] of every token is named at F_1 and slot Y (not later, at the readout)."""
    from icdl.construct.engine.layers import HeadTable, ReLUAttention

    model, prompt = _setup()
    lay = model.layout
    f1 = model.block[0]
    heads = HeadTable()
    for m in range(f1.num_heads):  # copy F_1's heads ...
        q = [(int(i), float(c)) for i, c in zip(f1.q_idx[m], f1.q_coef[m], strict=True)]
        k = [(int(i), float(c)) for i, c in zip(f1.k_idx[m], f1.k_coef[m], strict=True)]
        v = [
            (int(s), int(d), float(c)) for s, d, c in zip(f1.v_src[m], f1.v_dst[m], f1.v_coef[m], strict=True)
        ]
        heads.add(q, k, [e for e in v if e[2] != 0.0])
    one = lay.index("ONE")
    heads.add([(one, 1.0)], [(one, 1.0)], [(one, lay.index("Y"), 1.0)])  # ... plus one stray write
    extra = ReLUAttention(heads.tensors(), lay.dim, role=f1.role, labels=lay.slot_labels())
    model.block[0] = extra
    model.block_layers = (extra, *model.block_layers[1:])
    assert "Y" in extra.info.writes
    rep = verify(model, *prompt, lipschitz_iters=0)
    div = rep.first_divergence
    assert div is not None and (div.step, div.name, div.slot) == (0, "forward_1", "Y")


def test_gate_margin_is_measured_independently() -> None:
    """gate_margin = C - max |a0 p(N) + a1 y + b| over the loss units, every token and every w the verifier
    evaluates (each step's start and the final w); for squared loss the arguments are ±2 (p(N) - y)."""
    model, (x, y, xq, w0) = _setup()
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    spec = model.spec
    traj = reference_gd(spec, "squared", w0, x, y, lr=0.2, steps=model.steps, box=0.5)
    x_all = torch.cat([x, xq[None]])
    y_all = torch.cat([y, torch.zeros(1, spec.out_dim, dtype=y.dtype)])
    worst = max(float((2 * (forward(spec, w, x_all) - y_all)).abs().max()) for w in traj)
    assert rep.gate_margin == pytest.approx(model.config.gate - worst, rel=0, abs=1e-9)


VARIANT_OPTIONS = {
    "paper": {},
    "compact": {},
    "no-ewml": {},
    "softmax": {"eps": 1e-3, "radius": 4.0},
    "rows": {},
}


def _small(variant: str):
    spec = NetSpec(2, 2, 2, 1)
    n = 4
    x, y, xq, w0, _ = sample_task(spec, n, seed=1)
    model = compile_gd_transformer(spec, steps=2, n=n, lr=0.1, variant=variant, **VARIANT_OPTIONS[variant])
    return model, (x, y, xq, w0)


def _non_finite_cases() -> list[tuple[str, int, float]]:
    cases = []
    for variant in VARIANT_OPTIONS:
        blocks = len(_small(variant)[0].block)
        cases += [(variant, i, v) for i in range(blocks) for v in (math.nan, math.inf)]
    return cases


@pytest.mark.parametrize("variant, index, value", _non_finite_cases())
def test_non_finite_values_are_named_with_default_options(
    variant: str, index: int, value: float, assert_nondegenerate
) -> None:
    """NaN or inf in any sublayer of any variant, verified with verify's DEFAULT options (the Lipschitz
    estimate and the Corollary 1.1 bound run on the non-finite trajectory): no exception, the sublayer is
    named, and the report still has the degenerate flag and a FAIL verdict."""
    model, prompt = _small(variant)
    assert_nondegenerate(model.spec, prompt[0], prompt[1], prompt[3])  # GD moves w: a real check
    _plant(model.block[index], _inputs(model, prompt)[index], value)
    rep = verify(model, *prompt)
    div = rep.first_divergence
    assert div is not None and rep.verdict == "FAIL" and not rep.passed
    assert (div.step, div.index, div.name) == (0, index, model.block[index].info.name)
    # a softmax saturates: inf in its scores can leave a finite (wrong) output
    assert div.kind in ("nan", "inf") or (variant == "softmax" and math.isinf(value))
    json.dumps(rep.to_dict())  # still a JSON-ready report
    assert rep.table()


def _zeroing_cases() -> list[tuple[str, int, str]]:
    """(variant, block index, scratch slot) for every sublayer whose expected effects zero a slot."""
    from icdl.construct.variants.registry import get_variant

    cases = []
    for variant in VARIANT_OPTIONS:
        model, _ = _small(variant)
        v = get_variant(variant)
        for i, m in enumerate(model.block):
            zeros = [e.slot for e in v.effects(m.info, model.layout) if e.quantity == "zero"]
            if zeros:
                cases += [(variant, i, s) for s in sorted({zeros[0], zeros[-1]})]
    assert {c[0] for c in cases} == set(VARIANT_OPTIONS)  # every variant zeroes its scratch somewhere
    return cases


@pytest.mark.parametrize("value", [-0.5, 0.5, -1e-6, math.nan], ids=["neg", "pos", "tiny-neg", "nan"])
@pytest.mark.parametrize("token", [0, -1], ids=["first", "query"])
@pytest.mark.parametrize("variant, index, slot", _zeroing_cases())
def test_a_left_over_in_a_slot_that_must_be_zero_is_named(
    variant: str, index: int, slot: str, token: int, value: float, assert_nondegenerate
) -> None:
    """A sublayer that must leave a scratch slot at exactly 0 and leaves a value there — negative, positive,
    tiny or NaN, on one token only — FAILs at that sublayer and slot (the left-over is measured as |got|)."""
    model, prompt = _small(variant)
    assert_nondegenerate(model.spec, prompt[0], prompt[1], prompt[3])
    col = next(s.offset for s in model.layout.slots if s.label == slot)
    calls = [0]

    def leave(module, inputs, out):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == 1:  # step 0 only
            out = out.clone()
            out[:, token, col] = value if math.isnan(value) else out[:, token, col] + value
        return out

    model.block[index].register_forward_hook(leave)
    rep = verify(model, *prompt, lipschitz_iters=0)
    div = rep.first_divergence
    assert div is not None and rep.verdict == "FAIL"
    assert (div.step, div.index, div.slot) == (0, index, slot)
    if not math.isnan(value):
        assert div.kind == "finite" and div.error == pytest.approx(abs(value), rel=1e-9)
