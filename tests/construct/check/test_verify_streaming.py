"""The streaming verifier (issue 18 item 5) gives the same report as the verifier it replaced, which traced
every sublayer state and then walked them; and it never holds more than a few states at once.

``_OldWalk``/``_old_compare`` below are that previous implementation (trace every state, build the whole
expected state per sublayer, compare every slot), kept here as the independent reference.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.build.contract import Expect, Reference
from icdl.construct.check.report import Divergence
from icdl.construct.check.stream import slot_error
from icdl.construct.check.verify import (
    Checked,
    Prompt,
    _count,
    _Counters,
    _declared_check,
    compare,
    recursion,
    report,
    verify,
)
from icdl.construct.compile import CompiledModel, TracePoint, default_tol
from icdl.construct.variants.registry import get_variant
from icdl.nets import NetSpec, gradient

_EXACT = ("p", "r_prime", "u", "s")


class _OldWalk:
    """The walker of the verifier before streaming (states traced first, then walked)."""

    def __init__(self, model: CompiledModel, H0: Tensor, prompt: Prompt, tol: float, on_step) -> None:
        variant = get_variant(model.config.variant)
        self.model, self.prompt, self.tol, self.on_step = model, prompt, tol, on_step
        self.layout = model.layout
        self.slots = {s.label: s for s in self.layout.slots}
        self.T_all, a = H0.shape[1], self.layout.prefix_tokens
        self.token_rows = {
            "all": slice(None),
            "query": slice(self.T_all - 1, None),
            "data": slice(a, None),
            "prefix": slice(0, a),
        }
        self.effects = {m.info.name: variant.effects(m.info, self.layout) for m in model.block_layers}
        self.readout_effects = {
            m.info.name: variant.effects(m.info, self.layout) for m in model.readout_layers
        }
        self.x_all, self.y_all, self.tmask = prompt.x_all, prompt.y_all, prompt.mask
        self.first: Divergence | None = None
        self.max_rel = self.spread = self.scratch_max = 0.0
        self.cur = H0[0].clone()
        self.step_w = prompt.w0
        self.ref = self.reference(prompt.w0)
        self.w_tf = [prompt.w0]
        self.grad_err: list[float] = []
        self.grad_norm: list[float] = []
        self.applied_norm: list[float] = []
        self.per_step: list[dict[str, float]] = []
        self.acc = dict.fromkeys(_EXACT, math.nan)
        self.applied: Tensor | None = None
        self.last = len(model.block_layers) - 1

    def reference(self, w: Tensor) -> Reference:
        m, cfg = self.model, self.model.config
        sur = recursion(m, w, self.x_all, self.y_all, self.tmask, surrogate=True)
        exact = recursion(m, w, self.x_all, self.y_all, self.tmask, surrogate=False)
        ref = Reference(w, sur, exact, cfg.lr, cfg.box, m, self.x_all, self.y_all, self.tmask)
        if self.on_step is not None:
            self.on_step(ref)
        return ref

    def place(self, e: Expect, val: Tensor) -> Tensor:
        if val.dim() == 1:
            return val
        rows = self.token_rows[e.tokens]
        if val.shape[0] == self.T_all:
            return val[rows]
        if val.shape[0] == self.prompt.n + 1 and e.tokens in ("data", "query"):
            return val if e.tokens == "data" else val[-1:]
        if val.shape[0] == len(range(self.T_all)[rows]):
            return val
        raise ValueError("bad shape")

    def expected(self, pt: TracePoint, H: Tensor):
        expects = (self.readout_effects if pt.step is None else self.effects)[pt.name]
        exp = self.cur.clone()
        tols: dict[str, float] = {}
        dt = self.model.config.torch_dtype
        for e in expects:
            idx = list(self.slots[e.slot].indices)
            rows = self.token_rows[e.tokens]
            val = torch.zeros(len(idx), dtype=dt) if e.quantity == "zero" else self.ref.value(e)
            exp[rows, idx] = self.place(e, val)
            if e.rtol is not None:
                tols[e.slot] = e.rtol
            if isinstance(e.quantity, str) and e.quantity in _EXACT and pt.step is not None:
                want = self.place(e, self.ref.value(e, self.ref.exact))
                err = float((H[rows][:, idx] - want).abs().max())
                old = self.acc[e.quantity]
                self.acc[e.quantity] = err if math.isnan(old) else max(old, err)
            if e.applied_step or e.quantity == "w_step":
                self.applied = self.layout.read_weights(H)
        return exp, tols

    def check(self, pt: TracePoint, H: Tensor, exp: Tensor, tols: dict[str, float]) -> None:
        errs = [
            slot_error(s.label, H[:, list(s.indices)], exp[:, list(s.indices)]) for s in self.layout.slots
        ]
        for se in errs:
            if se.kind == "finite":
                self.max_rel = max(self.max_rel, se.rel)
        failing = [se for se in errs if not se.rel <= tols.get(se.slot, self.tol)]
        if self.first is None and failing:
            bad = max(failing, key=lambda se: se.rank)
            self.first = Divergence(pt.step, pt.index, pt.name, pt.info.role, bad.slot, bad.abs, bad.kind)

    def end_step(self, H: Tensor) -> None:
        layout, p = self.layout, self.prompt
        W = layout.weight_copies(H)
        self.spread = max(self.spread, float((W - W[0]).abs().max()))
        self.scratch_max = max(self.scratch_max, float(H[:, layout.scratch_indices()].abs().max()))
        w_new = layout.read_weights(H).clone()
        g_tf = (self.step_w - (self.applied if self.applied is not None else w_new)) / self.model.config.lr
        true = gradient(self.model.spec, self.model.config.loss, self.step_w, p.x, p.y)
        self.grad_err.append(float((g_tf - true).norm()))
        self.grad_norm.append(float(true.norm()))
        self.applied_norm.append(float(g_tf.norm()))
        self.applied = None
        self.step_w = w_new
        self.w_tf.append(w_new)
        self.per_step.append(self.acc)
        self.acc = dict.fromkeys(_EXACT, math.nan)


def _old_compare(model: CompiledModel, prompt: Prompt, tol: float, on_step) -> tuple[Tensor, _OldWalk]:
    """Trace every state, then walk them (the verifier before streaming); returns (output, walker)."""
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    points: list[tuple[TracePoint, Tensor]] = []
    out = model.run(H0, trace=lambda pt, H: points.append((pt, H[0].clone())))
    walk = _OldWalk(model, H0, prompt, tol, on_step)
    for pt, H in points:
        if pt.index == 0 and pt.step != 0 and not (pt.step is None and model.steps == 0):
            walk.ref = walk.reference(walk.step_w)
        exp, tols = walk.expected(pt, H)
        walk.check(pt, H, exp, tols)
        walk.cur = H
        if pt.step is not None and pt.index == walk.last:
            walk.end_step(H)
    return out, walk


def _both(model: CompiledModel, prompt: Prompt):
    """The old traced walk and the streaming comparison of ``model`` on ``prompt``, each with its own range
    counters: ``(out_old, old, c_old, trace, new, c_new)``."""
    tol = default_tol(model.config.dtype)
    c_old, c_new = _Counters(), _Counters()
    out_old, old = _old_compare(model, prompt, tol, lambda r: _count(model, r, c_old, prompt.n, prompt.y_all))
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    tr, new = compare(
        model, H0, prompt, tol=tol, on_step=lambda r: _count(model, r, c_new, prompt.n, prompt.y_all)
    )
    return out_old, old, c_old, tr, new, c_new


# (variant, activation, extra options): every variant, ReLU and smooth, with and without the box
SETUPS: list[tuple[str, str, dict]] = [
    ("paper", "relu", {"projection": "box", "box": 0.5}),
    ("paper", "sigmoid", {}),
    ("compact", "relu", {}),
    ("compact", "tanh", {"projection": "box", "box": 0.6}),
    ("no-ewml", "relu", {"projection": "box", "box": 0.5}),
    ("no-ewml", "relu", {"output": "linear"}),
    ("rows", "relu", {"projection": "box", "box": 0.5}),
    ("rows", "sigmoid", {}),
    ("softmax", "relu", {"radius": 4.0}),
    ("softmax", "tanh", {"projection": "box", "box": 0.6}),
]


def _model(variant: str, activation: str, seed: int, opts: dict, steps: int = 3):
    opts = dict(opts)
    net = {"activation": activation, "output": opts.pop("output", "same")}
    spec = NetSpec(2, 3, 2, 1, **net) if variant == "softmax" else NetSpec(3, 4, 3, 2, **net)
    n = 6
    x, y, xq, w0, _ = sample_task(spec, n, seed=seed)
    kw = {"eps": 1e-2} if variant == "softmax" or activation != "relu" else {}
    model = compile_gd_transformer(spec, steps=steps, n=n, lr=0.2, variant=variant, **kw, **opts)
    return model, (x, y, xq, w0)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize(("variant", "activation", "opts"), SETUPS)
@pytest.mark.parametrize("seed", [0, 3])
def test_streaming_equals_the_traced_walk(variant, activation, opts, seed, assert_nondegenerate) -> None:
    model, task = _model(variant, activation, seed, opts)
    assert_nondegenerate(model.spec, task[0], task[1], task[3])
    prompt = Prompt.of(model, *task)
    out_old, old, c_old, tr, new, c_new = _both(model, prompt)
    assert torch.equal(tr.out, out_old)
    assert new.first == old.first
    assert new.max_rel == old.max_rel and new.spread == old.spread and new.scratch_max == old.scratch_max
    assert new.grad_err == old.grad_err
    assert len(new.w_tf) == len(old.w_tf) and all(
        torch.equal(a, b) for a, b in zip(new.w_tf, old.w_tf, strict=True)
    )
    assert len(new.per_step) == len(old.per_step)
    for a, b in zip(new.per_step, old.per_step, strict=True):
        assert a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    assert (c_new.window, c_new.range, c_new.gate_margin) == (c_old.window, c_old.range, c_old.gate_margin)


def _report_fields(rep) -> dict:
    d = rep.to_dict()
    return {k: v for k, v in d.items() if not k.startswith("seconds")}


@pytest.mark.parametrize(("variant", "activation", "opts"), SETUPS[::3])
def test_the_report_is_the_same(variant, activation, opts) -> None:
    """The whole report (timings aside) from the streaming comparison and from the old one."""
    model, task = _model(variant, activation, 1, opts)
    prompt = Prompt.of(model, *task)
    tol = default_tol(model.config.dtype)
    c_old = _Counters()

    def on_step(r) -> None:  # the range counters and the declared-error check, as verify's on_step
        _count(model, r, c_old, prompt.n, prompt.y_all)
        _declared_check(model, r, c_old, tol)

    out_old, old = _old_compare(model, prompt, tol, on_step)
    from icdl.construct.check.verify import Comparison, Trace

    cmp = Comparison(
        old.first,
        old.max_rel,
        old.per_step,
        old.grad_err,
        old.w_tf,
        old.spread,
        old.scratch_max,
        old.grad_norm,
        old.applied_norm,
    )
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    rep_old = report(Checked(model, prompt, Trace(H0, out_old, 0.0), cmp, c_old, tol, 0.0), lipschitz_iters=5)
    rep_new = verify(model, *task, lipschitz_iters=5)
    a, b = _report_fields(rep_new), _report_fields(rep_old)
    assert a.keys() == b.keys()
    assert repr(a) == repr(b)


def _bad_weight(model: CompiledModel, task, index: int, value: float) -> None:
    """Plant ``value`` into the first coefficient of block sublayer ``index`` whose change alters its output
    on its step-0 input (dead units make some irrelevant)."""
    H = model.build_prompt(*task)
    for m in model.block_layers[:index]:
        H = m(H)
    module = model.block[index]
    before = module(H)
    for table in module.coefficient_tables():
        flat = table.view(-1)
        for k in torch.nonzero(flat).flatten().tolist():
            old = float(flat[k])
            flat[k] = value if not math.isfinite(value) else old * 1.5 + value
            if not torch.equal(module(H), before):
                return
            flat[k] = old
    raise AssertionError("no weight matters")


@pytest.mark.parametrize("variant", ["paper", "rows", "softmax"])
@pytest.mark.parametrize("value", [0.25, math.nan, math.inf])
def test_a_planted_error_gives_the_same_findings(variant: str, value: float) -> None:
    """Off the fast path (a sublayer changes what it must not, or NaN/inf spread): still identical."""
    model, task = _model(variant, "relu", 2, {"radius": 4.0} if variant == "softmax" else {})
    _bad_weight(model, task, 1, value)
    prompt = Prompt.of(model, *task)
    _, old, _, _, new, _ = _both(model, prompt)
    assert new.first is not None and new.first == old.first
    assert _same(new.max_rel, old.max_rel) and new.grad_err == pytest.approx(old.grad_err, nan_ok=True)
    assert repr(new.per_step) == repr(old.per_step)


def _alive_storages(shape: tuple[int, ...]) -> dict[int, torch.UntypedStorage]:
    """The distinct float64 storages alive now that hold at least one state of ``shape`` (T, D), by
    address."""
    need = math.prod(shape) * 8
    seen = {}
    for o in gc.get_objects():
        if type(o) is torch.Tensor and o.dtype == torch.float64:
            st = o.untyped_storage()
            if st.nbytes() >= need:
                seen[st.data_ptr()] = st
    return seen


def _states_alive(shape: tuple[int, ...], before: frozenset[int] = frozenset()) -> int:
    """How many such storages are alive now, other than ``before`` (those alive before the run: left by
    earlier tests in the same process)."""
    return len(_alive_storages(shape).keys() - before)


def test_the_verifier_holds_a_bounded_number_of_states(monkeypatch) -> None:
    """Memory: at every sublayer the verifier holds O(1) states (not one per sublayer as a full trace)."""
    model, task = _model("paper", "relu", 0, {}, steps=4)
    T, D = model.n + 1, model.layout.dim
    counts: list[int] = []
    run = CompiledModel.run
    gc.collect()  # garbage of earlier tests in this process (mutmut runs them in any order) is not the run's
    held = _alive_storages((T, D))  # held, so that no state of the run can take one's address
    before = frozenset(held)

    def counting(self, H, trace: Callable | None = None, readout: bool = True, **kw):
        def hook(pt, state):
            new = trace(pt, state) if trace is not None else None
            counts.append(_states_alive((T, D), before))
            return new

        return run(self, H, trace=hook, readout=readout, **kw)

    monkeypatch.setattr(CompiledModel, "run", counting)
    verify(model, *task, lipschitz_iters=0)
    assert len(counts) == model.num_sublayers + model.readout_sublayers
    assert max(counts) <= 4, counts


def _misdirect(model: CompiledModel, index: int) -> None:
    """Make block sublayer ``index`` also add 0.5 to coordinate 0 of the query (the X slot, which no block
    sublayer may change), leaving the slots it is expected to write as they were."""
    module = model.block[index]
    inner = module.forward

    def forward(H: Tensor) -> Tensor:
        out = inner(H).clone()
        out[:, -1, 0] += 0.5
        return out

    module.forward = forward  # type: ignore[method-assign]


@pytest.mark.parametrize("variant", ["paper", "rows"])
def test_a_write_outside_the_named_slots_is_found(variant: str) -> None:
    """A sublayer that changes a coordinate no Expect names (the bit-for-bit check of the kept columns fails,
    and those slots are measured): the same divergence as the whole-state comparison, in slot X."""
    model, task = _model(variant, "relu", 2, {})
    _misdirect(model, 1)
    prompt = Prompt.of(model, *task)
    _, old, _, _, new, _ = _both(model, prompt)
    assert old.first is not None and (old.first.index, old.first.slot) == (1, "X")
    assert new.first == old.first and _same(new.max_rel, old.max_rel)


def _misdirect_named(model: CompiledModel, prompt: Prompt) -> int:
    """Make the first block sublayer that writes a slot on some tokens only also add 0.5 to that slot on a
    token its Expects do not name (a coordinate the check measures only when the rest is not unchanged);
    returns the sublayer's index."""
    from icdl.construct.check.stream import StreamCheck

    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    plans = StreamCheck(model, H0, prompt, default_tol(model.config.dtype)).plans
    for index, m in enumerate(model.block_layers):
        plan = plans[(0, m.info.name)]
        if plan.free_rows and plan.named:
            row, col = plan.free_rows[0].start, plan.named[0][1].start
            inner = m.forward

            def forward(H: Tensor, inner=inner, row=row, col=col) -> Tensor:
                out = inner(H).clone()
                out[:, row, col] += 0.5
                return out

            m.forward = forward  # type: ignore[method-assign]
            return index
    raise AssertionError("no sublayer writes on some tokens only")


def test_a_named_slot_written_on_a_token_not_named_is_found() -> None:
    """A sublayer that writes its own slot also on a token no Expect names: the named slots are then
    measured on every token, and the divergence is the whole-state comparison's."""
    model, task = _model("rows", "relu", 2, {})
    prompt = Prompt.of(model, *task)
    index = _misdirect_named(model, prompt)
    _, old, _, _, new, _ = _both(model, prompt)
    assert old.first is not None and old.first.index == index
    assert new.first == old.first and _same(new.max_rel, old.max_rel)


@pytest.mark.parametrize("value", [0.25, math.nan, math.inf])
def test_a_slot_that_must_hold_zero_is_measured_as_the_whole_state(value: float) -> None:
    """A sublayer that leaves ``value`` in a slot it must set to 0 everywhere (measured as ``|got|``, NaN and
    inf named): the same divergence and largest error as the whole-state comparison."""
    from icdl.construct.check.stream import StreamCheck

    model, task = _model("rows", "relu", 2, {})
    prompt = Prompt.of(model, *task)
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    plans = StreamCheck(model, H0, prompt, default_tol(model.config.dtype)).plans
    index, m = next(
        (i, m) for i, m in enumerate(model.block_layers) if plans[(0, m.info.name)].joint.zero.labels
    )
    slot = next(s for s in model.layout.slots if s.label == plans[(0, m.info.name)].joint.zero.labels[0])
    inner = m.forward

    def forward(H: Tensor) -> Tensor:
        out = inner(H).clone()
        out[:, -1, slot.offset] = value
        return out

    m.forward = forward  # type: ignore[method-assign]
    _, old, _, _, new, _ = _both(model, prompt)
    assert old.first is not None and (old.first.index, old.first.slot) == (index, slot.label)
    assert new.first == old.first and _same(new.max_rel, old.max_rel)
