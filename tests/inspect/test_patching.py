"""Activation patching scored against the ledger: edge patching with flipped labels finds exactly the
label circuit (every edge in it moves the update, every other edge moves nothing), hook_write node patching
finds exactly its sublayers, and residual-stream patching over-reports (the stream carries the labels on)."""

from __future__ import annotations

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task
from icdl.errors import InputError
from icdl.inspect.ledger import circuit_nodes, label_circuit
from icdl.inspect.patching import Score, edge_patching, node_patching, resid_patching, score
from icdl.nets import NetSpec

VARIANTS = ("paper", "compact", "no-ewml", "softmax", "rows")


def _prompts(variant: str, activation: str = "relu", seed: int = 0):  # type: ignore[no-untyped-def]
    spec = NetSpec(depth=3, width=2, in_dim=2, out_dim=1, activation=activation)
    model = compile_gd_transformer(spec, lr=0.2, steps=2, n=5, variant=variant)
    x, y, xq, w0, _ = sample_task(spec, 5, seed=seed)
    return model, model.build_prompt(x, y, xq, w0), model.build_prompt(x, -y, xq, w0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_edge_patching_finds_the_label_circuit(variant: str) -> None:
    model, H, Hc = _prompts(variant)
    truth = {tuple(e) for e in label_circuit(model)}
    effects = edge_patching(model, H, Hc)
    assert truth and truth <= set(effects)  # every circuit edge is a candidate
    inside = [v for k, v in effects.items() if k in truth]
    outside = [v for k, v in effects.items() if k not in truth]
    assert min(inside) > 1e-3 and max(outside) < 1e-9  # a wide margin, not a tuned threshold
    s = score(effects, truth)
    assert (s.precision, s.recall) == (1.0, 1.0)


@pytest.mark.parametrize("variant", ("paper", "rows"))
def test_node_patching_exact_and_resid_patching_over_reports(variant: str) -> None:
    model, H, Hc = _prompts(variant, seed=1)
    nodes = circuit_nodes(label_circuit(model))
    node = node_patching(model, H, Hc)
    assert {n for n, v in node.items() if v > 1e-6} == nodes
    assert all(0 < node[n] <= 1 + 1e-9 for n in nodes)  # fractions, in [0, 1]
    resid = resid_patching(model, H, Hc)
    s = score(resid, nodes)
    assert s.recall == 1.0 and s.precision < 1.0  # forward sublayers look important: the stream carries y
    assert resid["steps.0.forward_1" if variant == "paper" else "steps.0.forward_derivative_1"] > 0.99


def test_patching_a_smooth_network() -> None:
    model, H, Hc = _prompts("compact", activation="tanh")
    truth = {tuple(e) for e in label_circuit(model)}
    s = score(edge_patching(model, H, Hc), truth)
    assert (s.precision, s.recall) == (1.0, 1.0)


def test_refusals() -> None:
    model, H, Hc = _prompts("paper")
    with pytest.raises(InputError, match="does not change"):
        node_patching(model, H, H.clone())
    with pytest.raises(InputError, match="out of range"):
        node_patching(model, H, Hc, step=2)
    with pytest.raises(InputError, match="differ in shape"):
        node_patching(model, H, torch.cat([Hc, Hc]))


def test_score_counts() -> None:
    s = score({"a": 0.5, "b": 0.0, "c": 1e-3}, {"a", "b", "z"}, threshold=1e-2)
    assert (s.tp, s.fp, s.fn) == (1, 0, 1)  # z was never tested: left out; c is below the threshold
    assert s.precision == 1.0 and s.recall == 0.5
    assert Score(0, 0, 0).precision == Score(0, 0, 0).recall == 1.0
    assert (Score(1, 2, 3) + Score(1, 0, 1)) == Score(2, 2, 4)
    assert Score(1, 3, 0).precision == 0.25
