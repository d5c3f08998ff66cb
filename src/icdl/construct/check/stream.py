"""The streaming sublayer check behind [`icdl.construct.check.verify`][icdl.construct.check.verify]: every
sublayer's output is compared with its expected effect while the model runs (the callback of
[`CompiledModel.run`][icdl.construct.compile.CompiledModel.run]), so the verifier holds the current state, the
one before it and the reference of the current GD step, never the whole trace.

What is compared is what the verifier has always compared: after each sublayer every slot must hold what the
variant's [`Expect`][icdl.construct.build.contract.Expect]s name (the surrogate recursion at the transformer's
own step-start weights), on the tokens they name, and every other coordinate must keep its value. The check
does that in two parts: the coordinates no Expect names are compared **bit for bit** with the state before the
sublayer (one elementwise ``!=`` over the state into a reused boolean buffer, the named slots on the named
tokens let through; for a sublayer run in place, ``point.written``, only the positions it added into can
differ, and those are compared with their old values, `icdl.construct.check.written`); only when one of them
differs (a bug, or a NaN the state already had) are those slots
measured as well, on every token. Each named slot is measured on its own columns
(``max |got - want| / max(1, |want|)``, NaN and inf named), on the named tokens while the rest is unchanged,
so an unchanged coordinate, whose error is 0, never decides the maximum or the first divergence: the findings
equal a comparison of the whole state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from icdl.construct.build.contract import Expect, Reference
from icdl.construct.check.report import Divergence
from icdl.construct.check.written import WrittenMap
from icdl.construct.compile import CompiledModel, TracePoint
from icdl.construct.variants.registry import get_variant
from icdl.nets import GradTerms, lemma1_terms

if TYPE_CHECKING:
    from icdl.construct.engine.layout import Slot

__all__ = ["Comparison", "Prompt", "SlotError", "StreamCheck", "recursion", "slot_error"]


def recursion(
    model: CompiledModel,
    w: Tensor,
    x_all: Tensor,
    y_all: Tensor,
    t: Tensor,
    *,
    surrogate: bool,
) -> GradTerms:
    """The GD-step terms for weights ``w`` (P,), tokens ``x_all`` (T, d_x), ``y_all`` (T, d_y), mask t (T,).

    [`icdl.nets.lemma1_terms`][icdl.nets.lemma1_terms] with the model's conditioned ReLU sums passed in as r,
    r', u (``surrogate=True``: what the heads compute, paper (C.6), (3.20)) or the exact ones (Lemma 1).
    Tokens with ``t = 0`` (the query) get u = 0 and add nothing to ``grad = (1/(2n)) sum_t s_t(j)
    p_t(j-1)^T``.
    """
    N = model.spec.depth
    if not surrogate:
        return lemma1_terms(model.spec, model.config.loss, w, x_all, y_all, mask=t)
    terms = model.terms
    return lemma1_terms(
        model.spec,
        model.config.loss,
        w,
        x_all,
        y_all,
        mask=t,
        r=[terms.r[j] for j in range(N)],
        r_prime=[terms.r_prime[j] for j in range(N)],
        u=terms.u,
    )


@dataclass
class SlotError:
    """Error of one slot after one sublayer: max ``|got - want| / max(1, |want|)``, its abs value, and
    whether the slot holds a NaN or an inf where the reference does not."""

    slot: str
    rel: float
    abs: float
    kind: str

    @property
    def rank(self) -> tuple[int, float]:
        """Order for "the worst slot": NaN and inf before any finite error."""
        return (0 if self.kind == "finite" else 1, self.rel if self.kind == "finite" else 0.0)


def slot_error(label: str, got: Tensor, want: Tensor) -> SlotError:
    """The [`SlotError`][icdl.construct.check.stream.SlotError] of ``got`` against ``want`` (same shape)."""
    diff = got - want
    if bool(
        torch.isfinite(diff).all()
    ):  # both finite everywhere: the general case below, without its NaN guards
        a = diff.abs()
        return SlotError(label, float((a / want.abs().clamp_min(1.0)).max()), float(a.max()), "finite")
    bad = ~torch.isfinite(got) & torch.isfinite(want)
    if bool(bad.any()):
        kind = "nan" if bool(torch.isnan(got[bad]).any()) else "inf"
        err = math.nan if kind == "nan" else math.inf
        return SlotError(label, err, err, kind)
    diff = diff.abs().nan_to_num(nan=0.0)  # NaN where both are NaN: no new divergence
    rel = diff / want.abs().nan_to_num(nan=1.0, posinf=1.0, neginf=1.0).clamp_min(1.0)
    return SlotError(label, float(rel.max()), float(diff.max()), "finite")


@dataclass(frozen=True)
class Prompt:
    """One prompt in the model's dtype: ``x`` (n, d_x), ``y`` (n, d_y), ``x_query`` (d_x,), ``w0`` (P,)."""

    x: Tensor
    y: Tensor
    x_query: Tensor
    w0: Tensor

    @classmethod
    def of(cls, model: CompiledModel, x: Tensor, y: Tensor, x_query: Tensor, w0: Tensor) -> Prompt:
        dt = model.config.torch_dtype
        return cls(x.to(dt), y.to(dt), x_query.to(dt), w0.to(dt))

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def x_all(self) -> Tensor:
        """The n examples' inputs, then the query's: ``(n + 1, d_x)``."""
        return torch.cat([self.x, self.x_query[None]])

    @property
    def y_all(self) -> Tensor:
        """The labels, then 0 for the query: ``(n + 1, d_y)``."""
        return torch.cat([self.y, torch.zeros(1, self.y.shape[1], dtype=self.y.dtype)])

    @property
    def mask(self) -> Tensor:
        """``t``: 1 on the examples, 0 on the query, ``(n + 1,)``."""
        return torch.cat([torch.ones(self.n, dtype=self.x.dtype), torch.zeros(1, dtype=self.x.dtype)])


@dataclass
class Comparison:
    """What the sublayer check found: the first divergence, the largest relative sublayer error, per step
    the errors against exact GD terms and the gradient the transformer applied, and the step-end weights;
    per step also ``||∇L_n(w̄^{l-1})||_2`` (``grad_norm``) and ``||ḡ_l||_2`` of the applied gradient
    (``applied_norm``), what the a-priori budget must be small against to certify a GD step."""

    first: Divergence | None
    max_rel: float
    per_step: list[dict[str, float]]
    grad_err: list[float]
    w_tf: list[Tensor]
    spread: float
    scratch_max: float
    grad_norm: list[float] = field(default_factory=list)
    applied_norm: list[float] = field(default_factory=list)


# dtypes whose states `StreamCheck.unchanged` compares through numpy views (others: torch.equal)
_NUMPY_DTYPES = (torch.float64, torch.float32)

# quantities whose slots are also compared with the exact Lemma 1 terms (the columns of StepErrors)
_EXACT = ("p", "r_prime", "u", "s")


@dataclass(frozen=True)
class _Plan:
    """One sublayer's expected effect, resolved once: the Expects, the named slots in layout order (label,
    columns, indices of their Expects), the other slots and their columns merged into contiguous spans, the
    slots' own tolerances, whether a slot holds the applied step."""

    expects: tuple[Expect, ...]
    named: tuple[tuple[str, slice, tuple[int, ...]], ...]
    keep: tuple[tuple[str, slice], ...]
    spans: tuple[slice, ...]
    rows: slice
    free_rows: tuple[slice, ...]
    tols: dict[str, float]
    applied: bool
    joint: _Joint


@dataclass(frozen=True)
class _Group:
    """Named slots measured side by side: their labels, their columns as few contiguous spans, each slot's
    column range in the gather, and for each Expect on them (its index, its tokens relative to the
    measured ones, its column range)."""

    labels: tuple[str, ...]
    spans: tuple[slice, ...]
    bounds: tuple[tuple[int, int], ...]
    places: tuple[tuple[int, slice, slice], ...]

    def gather(self, S: Tensor, rows: slice) -> Tensor:
        """The group's slots of ``S`` (T, D) on the tokens ``rows``, side by side (a new tensor)."""
        return torch.cat([S[rows, sp] for sp in self.spans], dim=1)


@dataclass(frozen=True)
class _Joint:
    """How the named slots are measured while the rest of the state is unchanged: on the tokens ``rows``,
    the slots that must hold exactly 0 on all of them (``zero``: their error is ``|got|``) and the others."""

    rows: slice
    zero: _Group
    value: _Group


def _group(
    named: list[tuple[str, slice, tuple[int, ...]]], expects: list[Expect], token_rows: list[slice]
) -> _Group:
    """The ``_Group`` of the slots ``named`` (label, columns, Expect indices);
    ``token_rows[i]``: Expect i's tokens relative to the measured ones."""
    bounds, at, start = [], {}, 0
    spans: list[slice] = []  # the columns as few contiguous ranges (slices: no index gather)
    for label, cols, _ in named:
        bounds.append((start, start + cols.stop - cols.start))
        at[label] = slice(*bounds[-1])
        start = bounds[-1][1]
        if spans and spans[-1].stop == cols.start:
            spans[-1] = slice(spans[-1].start, cols.stop)
        else:
            spans.append(cols)
    places = tuple((i, token_rows[i], at[expects[i].slot]) for _, _, idx in named for i in idx)
    return _Group(tuple(lab for lab, _, _ in named), tuple(spans), tuple(bounds), places)


def _spans(slots: list[Slot]) -> list[slice]:
    """The columns of ``slots`` as few contiguous ranges, in column order."""
    spans: list[slice] = []
    for s in sorted(slots, key=lambda s: s.offset):
        if spans and spans[-1].stop == s.offset:
            spans[-1] = slice(spans[-1].start, s.offset + s.size)
        else:
            spans.append(slice(s.offset, s.offset + s.size))
    return spans


class StreamCheck:
    """The callback ``(point, H) -> None`` that checks each sublayer's output as the model runs (batch element
    0), and the state it keeps: the state before the sublayer, the current step's reference, the step-end
    weights, and what has been found so far ([`result`][icdl.construct.check.stream.StreamCheck.result])."""

    def __init__(
        self,
        model: CompiledModel,
        H0: Tensor,
        prompt: Prompt,
        tol: float,
        on_step: Callable[[Reference], None] | None = None,
    ) -> None:
        self.model, self.prompt, self.tol, self.on_step = model, prompt, tol, on_step
        self.layout = model.layout
        self.slot_by_label = {s.label: s for s in self.layout.slots}
        self.T_all, a = int(H0.shape[1]), self.layout.prefix_tokens
        self.token_rows = {
            "all": slice(None),
            "query": slice(self.T_all - 1, None),
            "data": slice(a, None),
            "prefix": slice(0, a),
        }
        variant = get_variant(model.config.variant)
        self.plans = {
            (0, m.info.name): self._plan(variant.effects(m.info, self.layout)) for m in model.block_layers
        }
        self.plans.update(
            {(1, m.info.name): self._plan(variant.effects(m.info, self.layout)) for m in model.readout_layers}
        )
        self.x_all, self.y_all, self.tmask = prompt.x_all, prompt.y_all, prompt.mask
        self.first: Divergence | None = None
        self.max_rel = self.spread = self.scratch_max = 0.0
        self.cur = H0[0]
        self.cur_version = self.cur._version
        self.step_w = prompt.w0
        self.ref = self.reference(prompt.w0)
        self.w_tf = [prompt.w0]
        self.grad_err: list[float] = []
        self.grad_norm: list[float] = []
        self.applied_norm: list[float] = []
        self.per_step: list[dict[str, float]] = []
        self.acc = self.fresh()
        self.applied: Tensor | None = None
        self.last = len(model.block_layers) - 1
        self.scratch_spans = _spans(self.layout.scratch_slots())
        # the buffer of `unchanged`'s elementwise comparison (None: states numpy cannot view, torch.equal)
        viewable = H0.device.type == "cpu" and H0.dtype in _NUMPY_DTYPES
        self._ne = np.empty(tuple(H0.shape[1:]), dtype=bool) if viewable else None
        self._maps: dict[tuple[bool, str], WrittenMap] = {}

    def _plan(self, expects: list[Expect]) -> _Plan:
        tols: dict[str, float] = {}
        by_slot: dict[str, list[int]] = {}
        for i, e in enumerate(expects):
            by_slot.setdefault(e.slot, []).append(i)
            if e.rtol is not None:
                tols[e.slot] = e.rtol
        named: list[tuple[str, slice, tuple[int, ...]]] = []
        keep: list[tuple[str, slice, tuple[int, ...]]] = []
        for s in self.layout.slots:
            cols = slice(s.offset, s.offset + s.size)
            idx = tuple(by_slot.get(s.label, ()))
            (named if idx else keep).append((s.label, cols, idx))
        # A negative or NaN tolerance would fail an unchanged slot too: then every slot is measured.
        if not all(t >= 0 for t in (self.tol, *tols.values())):
            named, keep = [*named, *keep], []
            named.sort(key=lambda item: item[1].start)
        spans: list[slice] = []  # the kept columns as few contiguous ranges: one torch.equal each
        for _, cols, _ in keep:
            if spans and spans[-1].stop == cols.start:
                spans[-1] = slice(spans[-1].start, cols.stop)
            else:
                spans.append(cols)
        rows, free_rows = self._rows(expects)
        return _Plan(
            tuple(expects),
            tuple(named),
            tuple((lab, cols) for lab, cols, _ in keep),
            tuple(spans),
            rows,
            free_rows,
            tols,
            any(e.applied_step or e.quantity == "w_step" for e in expects),
            self._joint(expects, named, rows),
        )

    def _joint(
        self, expects: list[Expect], named: list[tuple[str, slice, tuple[int, ...]]], rows: slice
    ) -> _Joint:
        """The measured tokens (those the Expects name; all when they name none) and the two groups of
        named slots: those whose Expects all write 0 on every measured token, and the others."""
        lo, hi, _ = rows.indices(self.T_all)
        if hi <= lo:
            lo, hi = 0, self.T_all
        token_rows = []
        for e in expects:
            t0, t1, _ = self.token_rows[e.tokens].indices(self.T_all)
            token_rows.append(slice(t0 - lo, t1 - lo))

        def zero(idx: tuple[int, ...]) -> bool:
            covered = {t for i in idx for t in range(hi - lo)[token_rows[i]]}
            return bool(idx) and all(expects[i].quantity == "zero" for i in idx) and len(covered) == hi - lo

        zeros = [item for item in named if zero(item[2])]
        values = [item for item in named if not zero(item[2])]
        return _Joint(slice(lo, hi), _group(zeros, expects, token_rows), _group(values, expects, token_rows))

    def _rows(self, expects: list[Expect]) -> tuple[slice, tuple[slice, ...]]:
        """The tokens the Expects name, as one range (all tokens when their union is not one), and the
        other tokens as ranges: those rows must equal the state before on every column (contiguous
        memory, compared faster than column spans)."""
        touched = sorted({t for e in expects for t in range(self.T_all)[self.token_rows[e.tokens]]})
        if not touched:
            return slice(0, 0), (slice(0, self.T_all),)
        if touched[-1] - touched[0] + 1 != len(touched):
            return slice(0, self.T_all), ()
        lo, hi = touched[0], touched[-1] + 1
        return slice(lo, hi), tuple(r for r in (slice(0, lo), slice(hi, self.T_all)) if r.stop > r.start)

    @staticmethod
    def fresh() -> dict[str, float]:
        """Per step, max error against the exact Lemma 1 terms; NaN until some Expect names the quantity."""
        return dict.fromkeys(_EXACT, math.nan)

    def reference(self, w: Tensor) -> Reference:
        """The reference of the GD step that starts at the transformer's own weights ``w``."""
        m, cfg = self.model, self.model.config
        sur = recursion(m, w, self.x_all, self.y_all, self.tmask, surrogate=True)
        exact = recursion(m, w, self.x_all, self.y_all, self.tmask, surrogate=False)
        ref = Reference(w, sur, exact, cfg.lr, cfg.box, m, self.x_all, self.y_all, self.tmask)
        if self.on_step is not None:
            self.on_step(ref)
        return ref

    def place(self, e: Expect, val: Tensor) -> Tensor:
        """The expected value on the tokens ``e.tokens`` selects: ``val`` has a row per token of the prompt,
        per data token (built-in quantities) or per selected token."""
        if val.dim() == 1:
            return val
        rows = self.token_rows[e.tokens]
        if val.shape[0] == self.T_all:
            return val[rows]
        if val.shape[0] == self.prompt.n + 1 and e.tokens in ("data", "query"):
            return val if e.tokens == "data" else val[-1:]
        if val.shape[0] == len(range(self.T_all)[rows]):
            return val
        raise ValueError(f"expected value for slot {e.slot} has {val.shape[0]} rows ({e.tokens} tokens)")

    def __call__(self, pt: TracePoint, H: Tensor) -> None:
        """Check the state ``H`` (B, T, D) after the sublayer at ``pt``; it is the next one's input."""
        if pt.written is None and self.cur._version != self.cur_version:  # in place only as declared
            raise RuntimeError(
                f"{pt.describe()} changed its input in place; the streaming check needs "
                "sublayers that return a new state (out = H + f(H))"
            )
        if pt.index == 0 and pt.step != 0 and not (pt.step is None and self.model.steps == 0):
            self.ref = self.reference(self.step_w)
        S = H[0]
        plan = self.plans[(1 if pt.step is None else 0, pt.name)]
        if pt.step is not None:
            self.exact_errors(plan, S)
        if plan.applied:
            self.applied = self.layout.read_weights(S)
        self.check(pt, plan, S)
        self.cur, self.cur_version = S, S._version  # later checks start from the transformer's own state
        if pt.step is not None and pt.index == self.last:
            self.end_step(S)

    def exact_errors(self, plan: _Plan, S: Tensor) -> None:
        """Per step, the largest error of the slots holding p, r', u, s against the exact Lemma 1 terms."""
        for e in plan.expects:
            if isinstance(e.quantity, str) and e.quantity in _EXACT:
                slot = self.slot_by_label[e.slot]
                want = self.place(e, self.ref.value(e, self.ref.exact))
                got = S[self.token_rows[e.tokens], slot.offset : slot.offset + slot.size]
                err = float((got - want).abs().max())
                old = self.acc[e.quantity]
                self.acc[e.quantity] = err if math.isnan(old) else max(old, err)

    def want(self, plan: _Plan, cols: slice, idx: tuple[int, ...]) -> Tensor:
        """The expected columns ``cols`` after the sublayer: the state before it, with the named tokens
        replaced by the reference values of the Expects ``idx`` (in their order)."""
        out = self.cur[:, cols]
        if not idx:
            return out
        out = out.clone()
        dt = self.model.config.torch_dtype
        for i in idx:
            e = plan.expects[i]
            val = torch.zeros(cols.stop - cols.start, dtype=dt) if e.quantity == "zero" else self.ref.value(e)
            out[self.token_rows[e.tokens]] = self.place(e, val)
        return out

    def measure(
        self, plan: _Plan, S: Tensor, written: tuple[WrittenMap, Tensor] | None = None
    ) -> list[SlotError]:
        """The [`SlotError`][icdl.construct.check.stream.SlotError] of every named slot on the named tokens,
        in layout order: the slots gathered side by side and measured in one pass (the same elementwise
        errors and maxima as one [`slot_error`][icdl.construct.check.stream.slot_error] per slot, which is
        what a NaN or inf anywhere falls back to). A slot that must hold 0 has ``|got - 0| / max(1, 0) =
        |got|`` as both errors. ``written``: the sublayer ran in place (its map and the old values), so the
        state before is ``S`` with those put back."""
        j = plan.joint
        errs: dict[str, SlotError] = {}
        if j.zero.labels:
            got = j.zero.gather(S, j.rows)
            ab = got.abs().amax(0).tolist()  # NaN and inf propagate into the column maxima
            finite = all(map(math.isfinite, ab))
            for lab, (c0, c1) in zip(j.zero.labels, j.zero.bounds, strict=True):
                g, m = got[:, c0:c1], max(ab[c0:c1])
                errs[lab] = (
                    SlotError(lab, m, m, "finite") if finite else slot_error(lab, g, torch.zeros_like(g))
                )
        if j.value.labels:
            errs.update(self._measure_values(plan, j.value, j.rows, S, written))
        return [errs[lab] for lab, _, _ in plan.named]

    def _measure_values(
        self,
        plan: _Plan,
        grp: _Group,
        rows: slice,
        S: Tensor,
        written: tuple[WrittenMap, Tensor] | None = None,
    ) -> dict[str, SlotError]:
        """``measure`` for the slots that hold reference values
        (or keep some of the state before)."""
        got = grp.gather(S, rows)
        if written is not None:  # the state before is S with the written positions' old values
            want = got.clone() if self.cur.data_ptr() == S.data_ptr() else grp.gather(self.cur, rows)
            written[0].patch(want, written[1])
        else:
            want = grp.gather(self.cur, rows)
        for i, tokens, cols in grp.places:
            e = plan.expects[i]
            if e.quantity == "zero":
                want[tokens, cols] = 0.0
            else:
                want[tokens, cols] = self.place(e, self.ref.value(e))
        bounds = list(zip(grp.labels, grp.bounds, strict=True))
        a = (got - want).abs_()
        ab = a.amax(0).tolist()  # NaN and inf propagate into the column maxima
        if not all(map(math.isfinite, ab)):
            return {lab: slot_error(lab, got[:, c0:c1], want[:, c0:c1]) for lab, (c0, c1) in bounds}
        rel = a.div_(want.abs_().clamp_min_(1.0)).amax(0).tolist()
        return {lab: SlotError(lab, max(rel[c0:c1]), max(ab[c0:c1]), "finite") for lab, (c0, c1) in bounds}

    def _written_map(self, pt: TracePoint, plan: _Plan, idx: Tensor, S: Tensor) -> WrittenMap:
        """The [`WrittenMap`][icdl.construct.check.written.WrittenMap] of the sublayer at ``pt`` (built once
        per sublayer and written-positions tensor)."""
        key = (pt.step is None, pt.name)
        m = self._maps.get(key)
        if m is None or m.idx is not idx:
            j = plan.joint
            named = [cols for _, cols, _ in plan.named]
            shape = (int(S.shape[0]), int(S.shape[1]))
            covered = [(toks, cols) for _, toks, cols in j.value.places]
            m = WrittenMap.build(idx, shape, plan.rows, named, j.rows, j.value.spans, covered)
            self._maps[key] = m
        return m

    def unchanged(self, plan: _Plan, S: Tensor) -> bool:
        """Whether every coordinate outside the named slots on the named tokens equals the state before,
        bit for bit (``!=`` as floats: a NaN is never equal, so it is measured): every column of the rows
        no Expect names, the kept columns on the others."""
        cur = self.cur
        if self._ne is None or S.dtype != cur.dtype or S.shape != self._ne.shape or S.device != cur.device:
            r = plan.rows
            same = all(torch.equal(S[f], cur[f]) for f in plan.free_rows)
            return same and all(torch.equal(S[r, cols], cur[r, cols]) for cols in plan.spans)
        # One elementwise pass over the contiguous states (numpy: several times faster than torch.equal on
        # column spans), then the named slots on the named tokens are let through.
        ne = np.not_equal(S.detach().numpy(), cur.detach().numpy(), out=self._ne)
        for _, cols, _ in plan.named:
            ne[plan.rows, cols] = False
        return not bool(ne.any())

    def check(self, pt: TracePoint, plan: _Plan, S: Tensor) -> None:
        """Compare the named slots with their expected values and the others with the state before; the
        first failing sublayer is the divergence."""
        # The kept columns are compared bit for bit; while they are unchanged, the named slots are measured on
        # the named tokens only (the other tokens, equal to the state before, add errors of exactly 0).
        w = pt.written
        if w is not None and w.before is not None and S.data_ptr() == self.cur.data_ptr():
            # Run in place: only the written positions can have changed (and the state before is gone,
            # but for their old values). A NaN already in the state was found where it was written.
            m = self._written_map(pt, plan, w.idx, S)
            if m.kept(S, w.before):
                errs = self.measure(plan, S, (m, w.before))
                self._record(pt, plan, errs)
                return
            self.cur = m.restore(S, w.before)
        elif self.unchanged(plan, S):
            self._record(pt, plan, self.measure(plan, S))
            return
        # measure the kept slots too, on every token (rare: a bug or a NaN)
        slots = [*plan.named, *((lab, cols, ()) for lab, cols in plan.keep)]
        slots.sort(key=lambda item: item[1].start)
        errs = [slot_error(lab, S[:, cols], self.want(plan, cols, idx)) for lab, cols, idx in slots]
        self._record(pt, plan, errs)

    def _record(self, pt: TracePoint, plan: _Plan, errs: list[SlotError]) -> None:
        """Fold one sublayer's slot errors into the largest error and the first divergence."""
        for se in errs:
            if se.kind == "finite":
                self.max_rel = max(self.max_rel, se.rel)
        failing = [se for se in errs if not se.rel <= plan.tols.get(se.slot, self.tol)]
        if self.first is None and failing:
            bad = max(failing, key=lambda se: se.rank)
            self.first = Divergence(pt.step, pt.index, pt.name, pt.info.role, bad.slot, bad.abs, bad.kind)

    def end_step(self, S: Tensor) -> None:
        """After the block's last sublayer: weight replication, scratch, the applied gradient, new w."""
        layout = self.layout
        W = layout.weight_copies(S)
        if W.shape[0] > 1:  # one copy spreads by 0; a NaN stays the spread (max(0.0, nan) is 0.0)
            here = float((W - W[0]).abs().max())
            self.spread = here if math.isnan(here) or math.isnan(self.spread) else max(self.spread, here)
        # the scratch columns as contiguous spans (views: no gather); a NaN in any is the maximum, as in one
        scratch = [float(S[:, sp].abs().max()) for sp in self.scratch_spans]
        most = math.nan if any(map(math.isnan, scratch)) else max(scratch, default=0.0)
        # a NaN stays the maximum (max() would keep the previous value: max(0.0, nan) is 0.0)
        self.scratch_max = math.nan if math.isnan(most) else max(self.scratch_max, most)
        # The gradient the transformer applied: read before the projection when a sublayer is expected
        # to write w - eta grad, else from the step's end (exact without projection).
        w_new = layout.read_weights(S).clone()
        g_tf = (self.step_w - (self.applied if self.applied is not None else w_new)) / self.model.config.lr
        # ∇L_n at the step's start weights: the examples' rows of the step's exact recursion (Lemma 1)
        assert self.ref.w is self.step_w
        true = self.ref.exact.first_rows(self.prompt.n).grad
        self.grad_err.append(float((g_tf - true).norm()))
        self.grad_norm.append(float(true.norm()))
        self.applied_norm.append(float(g_tf.norm()))
        self.applied = None
        self.step_w = w_new
        self.w_tf.append(w_new)
        self.per_step.append(self.acc)
        self.acc = self.fresh()

    def result(self) -> Comparison:
        """What the check found over the whole run."""
        return Comparison(
            self.first,
            self.max_rel,
            self.per_step,
            self.grad_err,
            self.w_tf,
            self.spread,
            self.scratch_max,
            self.grad_norm,
            self.applied_norm,
        )
