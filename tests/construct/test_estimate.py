"""The per-variant sizes of ``icdl construct``'s budget estimate (``Variant.sizes``, used by
icdl.construct.estimate) against the compiled models: token width and token count exact, sublayers per step
never below the model's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.estimate import construction_estimate
from icdl.construct.sizes import Sizes, paper_sizes
from icdl.construct.variants import VARIANTS, get_variant, register, unregister
from icdl.nets import NetSpec

CASES = [(v, "relu") for v in VARIANTS] + [(v, "sigmoid") for v in ("paper", "rows", "softmax")]


@pytest.mark.parametrize(("variant", "activation"), CASES)
def test_layout_matches_the_compiled_model(variant: str, activation: str) -> None:
    spec, n = NetSpec(3, 4, 3, 2, activation=activation), 5
    model = compile_gd_transformer(spec, steps=2, n=n, variant=variant, eps=1e-2)
    x, y, xq, w0, _ = sample_task(spec, n, seed=0, dtype=torch.float64)
    H = model.build_prompt(x, y, xq, w0)
    lay = get_variant(variant).sizes(spec, n)
    assert (lay.D, lay.T) == (model.embedding_dim, H.shape[-2]) == (H.shape[-1], H.shape[-2])
    assert model.sublayers_per_step <= lay.per_step <= model.sublayers_per_step + 3


def test_the_estimate_uses_the_variants_own_sizes() -> None:
    """A registered variant's ``sizes`` reach the estimate (a toy that doubles the paper's T costs more);
    a name not registered gets the paper's."""
    spec = NetSpec(3, 4, 3, 2)

    def doubled(s: NetSpec, examples: int) -> Sizes:
        return paper_sizes(s, 2 * examples + 1)

    paper = construction_estimate(spec, steps=3, examples=8, variant="paper")
    assert construction_estimate(spec, steps=3, examples=8, variant="no-such-variant") == paper
    register(dataclasses.replace(get_variant("paper"), name="toy-doubled", sizes=doubled))
    try:
        toy = construction_estimate(spec, steps=3, examples=8, variant="toy-doubled")
    finally:
        unregister("toy-doubled")
    assert toy.bytes > paper.bytes and toy.seconds > paper.seconds


def test_variants_differ_where_their_sizes_do() -> None:
    spec = NetSpec(4, 16, 4, 1)
    est = {v: construction_estimate(spec, steps=10, examples=64, variant=v) for v in VARIANTS}
    assert est["compact"] == est["paper"]
    assert est["rows"].bytes < est["paper"].bytes < est["softmax"].bytes
