"""Properties of the verifier that held-out set 3 (issue 35, ``scripts/mutation_heldout.py --set 3``) showed
no test pinned down: each was written after its plant survived the fast tier, and checked to fail with the
plant and pass without it."""

from __future__ import annotations

import math

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.nets import NetSpec, unflatten


def test_the_out_of_range_count_counts_pre_activations_beyond_minus_r_as_well_as_beyond_r() -> None:
    """(b) range counts every pre-activation with ``|z| > R`` a fitted sum sees, at every reference (the
    step starts and the readout), on every token. A tanh layer (fitted) whose pre-activations leave
    ``[-R, R]`` on both sides, a linear output layer scaled far inside it, and a learning rate so small that
    the weights do not move: every reference sees the pre-activations of ``w0``, so the count is
    ``(steps + 1)`` times the number of ``|z(1)| > R`` at ``w0`` (none within 1e-3 of R, so no rounding of
    the construction can move one across)."""
    spec = NetSpec(2, 4, 3, 1, activation="tanh", output="linear")
    n, steps, radius = 8, 2, 1.2
    x, y, xq, w0, _ = sample_task(spec, n, seed=2)
    w0 = w0.clone()
    w0[spec.offsets[1] :] *= 0.01  # |z(2)| far below R
    z1 = torch.cat([x, xq[None]]) @ unflatten(spec, w0)[0].T
    above, below = int((z1 > radius).sum()), int((z1 < -radius).sum())
    assert above > 0 and below > 0 and above != below  # the premise: both sides, unequal
    assert float(((z1.abs() - radius).abs()).min()) > 1e-3
    model = compile_gd_transformer(spec, steps=steps, n=n, lr=1e-9, radius=radius, eps=1e-3)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.out_of_range_count == (steps + 1) * (above + below)
    assert rep.verdict == "FAIL" and any(f.startswith("(b) range") for f in rep.failures)


def _model(variant: str = "paper"):  # type: ignore[no-untyped-def]
    """A compiled model (N = 2, K = 3, 2 steps), one prompt of it and that prompt's first state."""
    from icdl.construct.check.stream import Prompt

    spec = NetSpec(2, 3, 3, 2)
    n = 6
    x, y, xq, w0, _ = sample_task(spec, n, seed=1)
    model = compile_gd_transformer(spec, steps=2, n=n, lr=0.2, variant=variant)
    prompt = Prompt.of(model, x, y, xq, w0)
    return model, prompt, model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)


def _checked_with(edit, variant: str = "paper"):  # type: ignore[no-untyped-def]
    """The streaming check's result on ``_model(variant)`` whose states go through ``edit(point, H,
    layout)`` (a copy of H to change, or None) before the check sees them."""
    from icdl.construct.check.stream import StreamCheck

    model, prompt, H0 = _model(variant)
    check = StreamCheck(model, H0, prompt, 1e-9)

    def planted(pt, H):  # type: ignore[no-untyped-def]
        new = edit(pt, H.clone(), model.layout)
        H = H if new is None else new
        check(pt, H)
        return H

    model.run(H0, trace=planted)
    return check.result(), model


def _divergence_with_planted_errors(errors: dict[int, float]):  # type: ignore[no-untyped-def]
    """The first divergence with ``errors`` added, after step 1's third sublayer, to the slots at those
    layout positions (their first column, on the first data token), and the slots' labels."""

    def edit(pt, H, layout):  # type: ignore[no-untyped-def]
        if (pt.step, pt.index) != (0, 2):
            return None
        for k, e in errors.items():
            H[0, layout.prefix_tokens, layout.slots[k].offset] += e
        return H

    res, model = _checked_with(edit)
    return res.first, [s.label for s in model.layout.slots]


def test_the_first_divergence_names_the_worst_slot_of_its_sublayer_whatever_the_layout_order() -> None:
    """Two slots wrong after the same sublayer: the divergence names the one with the larger error (a NaN
    before any finite error), whether it comes first or last in the layout, with its own error."""
    for errors, worst, size in (
        ({0: 1e-3, -1: 1.0}, -1, 1.0),
        ({0: 1.0, -1: 1e-3}, 0, 1.0),
        ({0: 10.0, -1: float("nan")}, -1, None),
        ({0: float("nan"), -1: 10.0}, 0, None),
    ):
        div, labels = _divergence_with_planted_errors(errors)
        assert div is not None and (div.step, div.index) == (0, 2), errors
        assert div.slot == labels[worst], (errors, div)
        if size is None:
            assert div.kind == "nan"
        else:
            assert div.kind == "finite" and abs(div.error - size) < 1e-6, (errors, div)


def test_the_weight_spread_is_the_largest_difference_of_a_copy_from_the_first_either_way() -> None:
    """``weights_spread`` = max over steps of ``max |W_copy - W_first|``: a copy moved below the first one by
    0.5 after a step's last sublayer spreads by 0.5, as one moved above it does (the copies of a clean run
    agree exactly)."""
    clean, model = _checked_with(lambda pt, H, layout: None)
    assert clean.spread == 0.0
    last = len(model.block_layers) - 1
    for change in (-0.5, 0.5):

        def edit(pt, H, layout, change=change):  # type: ignore[no-untyped-def]
            if (pt.step, pt.index) != (0, last):
                return None
            H[0, -1, layout.indices("W")[0]] += change  # the query token's copy, not the first
            return H

        res, _ = _checked_with(edit)
        assert abs(res.spread - 0.5) < 1e-12, (change, res.spread)


def test_a_nan_weight_copy_is_the_spread_whichever_step_it_appears_in() -> None:
    """A NaN in a copy of W makes ``weights_spread`` NaN, whether it appears after the first step (before any
    finite spread) or after the last one (following a finite spread of 0.5 in the first): Python's ``max``
    would keep 0.5 or 0.0 and hide it. (Added after set 3, with the fix.)"""
    last = len(_model()[0].block_layers) - 1
    for plants in ({0: math.nan}, {0: 0.5, 1: math.nan}):

        def edit(pt, H, layout, plants=plants):  # type: ignore[no-untyped-def]
            if pt.step not in plants or pt.index != last:
                return None
            H[0, -1, layout.indices("W")[0]] += plants[pt.step]
            return H

        res, _ = _checked_with(edit)
        assert math.isnan(res.spread), (plants, res.spread)


def test_a_written_position_outside_the_named_region_is_kept_only_bit_for_bit() -> None:
    """``WrittenMap.kept``: a sublayer run in place keeps the written positions outside the named slots only
    when they hold their old values exactly: a change of one ulp there, or of 1e-9 relative (well inside
    ``allclose``'s tolerance), is a change (the state is then restored and measured), while a change inside
    the named region is not this check's."""
    from icdl.construct.check.written import WrittenMap

    g = torch.Generator().manual_seed(0)
    T, D = 5, 6
    idx = torch.arange(T * D)
    m = WrittenMap.build(idx, (T, D), slice(1, 3), [slice(0, 2)], slice(1, 3), [slice(0, 2)])
    S = torch.randn(T, D, generator=g, dtype=torch.float64)
    before = S.reshape(-1).clone()
    assert m.kept(S, before)
    for new in (torch.nextafter(S[4, 5], torch.tensor(math.inf, dtype=S.dtype)), S[4, 5] * (1 + 1e-9)):
        assert new != S[4, 5]
        changed = S.clone()
        changed[4, 5] = new
        assert not m.kept(changed, before)
    named = S.clone()
    named[1, 0] += 1.0
    assert m.kept(named, before)


@pytest.mark.parametrize("variant", ["paper", "rows"])
def test_a_named_slot_written_on_a_token_its_expects_do_not_name_is_a_divergence(variant: str) -> None:
    """The coordinates outside the named slots *on the named tokens* must keep their value: for every
    sublayer whose Expects name only some tokens (the readout's query row; the rows variant's data rows and
    prefix rows), a change of a named slot on a token they do not name is the first divergence, there."""
    from icdl.construct.check.stream import StreamCheck

    model, prompt, H0 = _model(variant)
    T = int(H0.shape[1])
    probe = StreamCheck(model, H0, prompt, 1e-9)
    cases = []
    for (part, name), plan in probe.plans.items():
        free = [t for t in range(T) if t not in range(T)[plan.rows]]
        if plan.named and free:
            cases.append((None if part else 0, name, free[0], plan.named[0][1].start))
    assert cases  # the premise: some sublayers name only some tokens
    for step, name, token, col in cases:

        def edit(pt, H, layout, step=step, name=name, token=token, col=col):  # type: ignore[no-untyped-def]
            if (pt.step, pt.name) != (step, name):
                return None
            H[0, token, col] += 0.25
            return H

        div = _checked_with(edit, variant)[0].first
        assert div is not None and (div.step, div.name) == (step, name), (name, token, div)
