"""The streaming check of sublayers run in place (``point.written``): a bug planted in a sublayer's additions
(``Sublayer.delta``, so the in-place path itself runs it) gives the same findings as the verifier that traced
every state and compared all of it (``_old_compare`` in test_verify_streaming.py, the independent reference).

The planted writes cover each part of the in-place check: a coordinate no Expect names (X of the query), a
named slot on a token its Expects do not name, a position of a named slot on the named tokens that must keep
its value (the projection's V slots, outside the places its Expects write), NaN and inf, and an addition of
exactly 0 (which changes nothing and must not be reported)."""

from __future__ import annotations

import math

import pytest
import torch
from test_verify_streaming import _both, _model, _same
from torch import Tensor

from icdl.construct.check.stream import StreamCheck
from icdl.construct.check.verify import Prompt
from icdl.construct.compile import CompiledModel, TracePoint, default_tol


def _plant(model: CompiledModel, index: int, token: int, col: int, value: float) -> None:
    """Make block sublayer ``index`` also add ``value`` at (``token``, ``col``) of every prompt, through its
    additions (so it still runs in place)."""
    m = model.block[index]
    inner = m.delta
    T, D = model.n + 1 + model.layout.prefix_tokens, model.layout.dim

    def delta(H: Tensor) -> tuple[Tensor, Tensor] | None:
        d = inner(H)
        assert d is not None
        idx, val = d
        extra = torch.arange(H.shape[0]) * (T * D) + (token % T) * D + col
        return torch.cat([idx, extra.to(idx.dtype)]), torch.cat([val, val.new_full(extra.shape, value)])

    m.delta = delta  # type: ignore[method-assign]


def _free_named_position(model: CompiledModel, prompt: Prompt) -> tuple[int, int, int]:
    """(sublayer, token, column) of a named slot on the named tokens that no Expect of that sublayer writes:
    it must keep its value (measured against the state before, rebuilt from the written old values)."""
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    plans = StreamCheck(model, H0, prompt, default_tol(model.config.dtype)).plans
    T = H0.shape[1]
    for index, m in enumerate(model.block_layers):
        j = plans[(0, m.info.name)].joint
        lo, hi, _ = j.rows.indices(T)
        cols = [c for sp in j.value.spans for c in range(sp.start, sp.stop)]
        placed = {
            (t, c)
            for _, toks, cs in j.value.places
            for t in range(hi - lo)[toks]
            for c in range(*cs.indices(len(cols)))
        }
        free = [(t, c) for t in range(hi - lo) for c in range(len(cols)) if (t, c) not in placed]
        if free:
            t, c = free[0]
            return index, lo + t, cols[c]
    raise AssertionError("every named position is written")


def _findings(model: CompiledModel, prompt: Prompt):
    """The old walk's and the streaming check's findings; the streaming run must have run in place."""
    points: list[TracePoint] = []
    run = model.run

    def spy(H: Tensor, trace=None, readout: bool = True, **kw) -> Tensor:
        def seen(pt: TracePoint, S: Tensor):
            if kw.get("inplace"):  # the streaming check's run (the old walk traces fresh states)
                points.append(pt)
            return trace(pt, S) if trace is not None else None

        return run(H, trace=seen, readout=readout, **kw)

    model.run = spy  # type: ignore[method-assign]
    try:
        _, old, _, _, new, _ = _both(model, prompt)
    finally:
        del model.run
    assert sum(pt.written is not None for pt in points) > len(points) // 2  # the in-place path ran
    return old, new


@pytest.mark.parametrize("where", ["unnamed", "token-not-named", "kept-named"])
@pytest.mark.parametrize("value", [0.5, math.nan, -math.inf, 0.0])
def test_a_planted_addition_gives_the_same_findings(where: str, value: float, assert_nondegenerate) -> None:
    model, task = _model("rows", "relu", 2, {})
    assert_nondegenerate(model.spec, task[0], task[1], task[3])
    prompt = Prompt.of(model, *task)
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    plans = StreamCheck(model, H0, prompt, default_tol(model.config.dtype)).plans
    if where == "unnamed":  # X of the query: no block sublayer may change it
        index, token, col = 1, -1, model.layout.slot("X").offset
    elif where == "token-not-named":
        index = next(i for i, m in enumerate(model.block_layers) if plans[(0, m.info.name)].free_rows)
        plan = plans[(0, model.block_layers[index].info.name)]
        index, token, col = index, plan.free_rows[0].start, plan.named[0][1].start
    else:
        index, token, col = _free_named_position(model, prompt)
    _plant(model, index, token, col, value)
    old, new = _findings(model, prompt)
    if value == 0.0:  # x + 0 = x: nothing changed, nothing reported
        assert old.first is None
    else:
        assert old.first is not None and old.first.index == index
    assert new.first == old.first and _same(new.max_rel, old.max_rel)
    assert new.grad_err == pytest.approx(old.grad_err, nan_ok=True, rel=0, abs=0)
    assert repr(new.per_step) == repr(old.per_step)
