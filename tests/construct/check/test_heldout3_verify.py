"""Properties of the verifier that held-out set 3 (issue 35, ``scripts/mutation_heldout.py --set 3``) showed
no test pinned down: each was written after its plant survived the fast tier, and checked to fail with the
plant and pass without it."""

from __future__ import annotations

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


def _divergence_with_planted_errors(errors: dict[int, float]):
    """Run the streaming check on a paper model with ``errors`` added, after step 1's third sublayer, to the
    slots of those layout positions (their first column, on the first data token): the first divergence."""
    from icdl.construct.check.stream import Prompt, StreamCheck

    spec = NetSpec(2, 3, 3, 2)
    n = 6
    x, y, xq, w0, _ = sample_task(spec, n, seed=1)
    model = compile_gd_transformer(spec, steps=2, n=n, lr=0.2)
    prompt = Prompt.of(model, x, y, xq, w0)
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    check = StreamCheck(model, H0, prompt, 1e-9)
    slots = model.layout.slots
    row = model.layout.prefix_tokens

    def planted(pt, H):
        if (pt.step, pt.index) == (0, 2):
            H = H.clone()
            for k, e in errors.items():
                H[0, row, slots[k].offset] += e
        check(pt, H)
        return H

    model.run(H0, trace=planted)
    return check.result().first, [s.label for s in slots]


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
