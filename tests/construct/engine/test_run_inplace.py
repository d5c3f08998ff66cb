"""``CompiledModel.run(inplace=True)`` (icdl.construct.engine.kernels.run_inplace): sublayers that are
additions at fixed places (``Sublayer.delta``) written into the state itself give every state bit for bit,
tell the trace exactly where they wrote and what was there, never write the caller's prompt, and step aside
for module hooks; and icdl.construct.check.written.WrittenMap against a plain reconstruction of the state
before."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.check.written import WrittenMap
from icdl.construct.compile import TracePoint
from icdl.nets import NetSpec


def _model_and_prompt(variant: str, assert_nondegenerate, batch: int = 1):
    """A compiled model and ``batch`` prompts of non-degenerate tasks (seeds 1, 2, ...)."""
    spec = NetSpec(depth=3, width=4, in_dim=2, out_dim=1)
    model = compile_gd_transformer(spec, steps=2, n=6, variant=variant)
    prompts = []
    for seed in range(1, batch + 1):
        x, y, xq, w0, _ = sample_task(spec, 6, seed=seed)
        assert_nondegenerate(spec, x, y, w0)
        prompts.append(model.build_prompt(x, y, xq, w0))
    return model, torch.cat(prompts)


@pytest.mark.parametrize("variant", ["paper", "compact", "rows"])
def test_run_in_place_gives_every_state_and_says_what_it_wrote(variant: str, assert_nondegenerate) -> None:
    model, H = _model_and_prompt(variant, assert_nondegenerate)
    H0 = H.clone()
    fresh: list[Tensor] = []
    out = model.run(H, trace=lambda pt, S: fresh.append(S.clone()), reuse=False)
    seen: list[tuple[TracePoint, Tensor]] = []
    got = model.run(H, trace=lambda pt, S: seen.append((pt, S.clone())), inplace=True)
    assert torch.equal(H, H0)  # the prompt is never written
    assert len(seen) == len(fresh) and torch.equal(got, out)
    in_place = 0
    for k, ((pt, S), want) in enumerate(zip(seen, fresh, strict=True)):
        assert torch.equal(S, want), pt.describe()
        if pt.written is None:
            continue
        in_place += 1
        prev = (fresh[k - 1] if k else H0).reshape(-1)
        idx, before = pt.written.idx.long(), pt.written.before
        assert before is not None and torch.equal(before, prev[idx])
        changed = torch.nonzero(S.reshape(-1) != prev).view(-1)  # only written positions may differ
        assert bool(torch.isin(changed, idx).all()), pt.describe()
    # every sublayer of these variants is additions at fixed places (attention, EWML and MLP deltas)
    assert in_place == len(seen)


@pytest.mark.parametrize("variant", ["paper", "rows"])
def test_untraced_runs_are_in_place_and_equal_for_a_batch(variant: str, assert_nondegenerate) -> None:
    model, H = _model_and_prompt(variant, assert_nondegenerate, batch=2)
    H0 = H.clone()
    want = model.run(H, reuse=False, inplace=False)
    assert torch.equal(model(H), want) and torch.equal(model.run(H, inplace=True), want)
    assert torch.equal(H, H0)


def test_module_hooks_see_every_sublayer_run_in_place(assert_nondegenerate) -> None:
    """A forward hook on a sublayer is called (the in-place path steps aside for it); its change is kept."""
    model, H = _model_and_prompt("rows", assert_nondegenerate)
    want = model.run(H, inplace=False, reuse=False)
    m = model.block_layers[2]
    calls: list[int] = []

    def hook(mod: object, args: object, out: Tensor) -> Tensor:
        calls.append(1)
        return out + 0.0

    handle = m.register_forward_hook(hook)
    try:
        got = model.run(H, inplace=True)
        assert len(calls) == model.steps and torch.equal(got, want)

        def shift(mod: object, args: object, out: Tensor) -> Tensor:
            return out + 1.0

        handle.remove()
        handle = m.register_forward_hook(shift)
        assert not torch.equal(model.run(H, inplace=True), want)
    finally:
        handle.remove()


def _plain_map(
    idx: Tensor,
    T: int,
    D: int,
    named_rows: slice,
    named_cols: list[slice],
    grows: slice,
    spans: list[slice],
    covered: list[tuple[slice, slice]],
):
    """Loops: per written position of batch element 0, (t, c); outside the named region; inside the group
    and not covered."""
    own, outside, inside = [], [], []
    gcols = [c for sp in spans for c in range(D)[sp]]
    rows = range(T)[grows]
    for k, p in enumerate(idx.tolist()):
        if p >= T * D:
            continue
        t, c = divmod(p, D)
        own.append(k)
        if not (t in range(T)[named_rows] and any(c in range(D)[cs] for cs in named_cols)):
            outside.append(k)
        if t in rows and c in gcols:
            r, gc = t - rows.start, gcols.index(c)
            if not any(r in range(len(rows))[a] and gc in range(len(gcols))[b] for a, b in covered):
                inside.append((k, r * len(gcols) + gc))
    return own, outside, inside


@pytest.mark.parametrize("seed", range(6))
def test_written_map_against_loops(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    T, D, B = 7, 11, 2
    idx = torch.randint(0, B * T * D, (40,), generator=g).to(torch.int32)
    idx = torch.cat([idx, idx[:5]])  # repeated positions
    named_rows, named_cols = slice(2, 6), [slice(1, 3), slice(7, 9)]
    grows, spans = slice(1, 6), [slice(1, 3), slice(7, 10)]
    covered = [(slice(0, 2), slice(1, 4)), (slice(4, 5), slice(0, 5))]  # rows, columns of the gather
    m = WrittenMap.build(idx, (T, D), named_rows, named_cols, grows, spans, covered)
    own, outside, inside = _plain_map(idx, T, D, named_rows, named_cols, grows, spans, covered)
    assert m.own().tolist() == own and m.outside.tolist() == outside
    assert sorted(zip(m.inside.tolist(), m.inside_dst.tolist(), strict=True)) == sorted(inside)
    assert len(own) < len(idx) and outside and inside  # every case is exercised

    prev = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    before = prev.reshape(-1)[idx.long()]
    after = prev.clone()
    after.view(-1).index_add_(0, idx, torch.randn(len(idx), generator=g, dtype=torch.float64))
    assert torch.equal(m.restore(after[0], before), prev[0])
    gathered = torch.cat([after[0, grows, sp] for sp in spans], dim=1)
    want = torch.cat([prev[0, grows, sp] for sp in spans], dim=1)
    for a, b in covered:  # expected values overwrite these: left as they are
        want[a, b] = gathered[a, b]
    m.patch(gathered, before)
    assert torch.equal(gathered, want)
    assert not m.kept(after[0], before)  # the outside positions changed
    same = prev.clone()
    named = torch.zeros(T, D, dtype=torch.bool)
    for cs in named_cols:
        named[named_rows, cs] = True
    same[0][named] += 1.0  # a change inside the named region only
    assert m.kept(same[0], before)
    nan = same.clone()
    nan.view(-1)[m.outside_pos[0]] = float("nan")
    nan_before = before.clone()
    nan_before[m.outside[0]] = float("nan")
    assert not m.kept(nan[0], nan_before)  # a NaN never equals itself
