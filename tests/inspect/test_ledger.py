"""The ground-truth ledger's claims, checked against the activations on random prompts: every slot it says
holds a GD quantity at a hook point holds that quantity, computed here independently from Lemma 1's plain
recursion (icdl.nets.lemma1_terms) along reference GD; and its graph and circuits against hand counts."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch import Tensor

from icdl.construct import compile_gd_transformer, sample_task
from icdl.inspect.ledger import circuit_nodes, label_circuit, ledger
from icdl.nets import NetSpec, lemma1_terms, projected_step, reference_gd

VARIANTS = ("paper", "compact", "no-ewml", "softmax", "rows")
# the softmax variant multiplies with fitted ReLU sums (its products err by ~eps); the others are exact
# for ReLU networks outside the relu' window
RTOL = {"softmax": 2e-2}


def _expected(q: dict[str, Any], spec: NetSpec, w: Tensor, x: Tensor, y: Tensor, lr: float) -> Tensor | None:
    """What quantity ``q`` is on the n + 1 data tokens (the query last) at step-start weights ``w``."""
    T = x.shape[0]
    t = torch.ones(T, 1, dtype=x.dtype)
    t[-1] = 0
    g = lemma1_terms(spec, "squared", w, x, y, mask=t[:, 0])
    j, name = q["layer"], q["quantity"]
    flat = {
        "grad": lambda: g.grad,
        "w": lambda: w,
        "w_step": lambda: w - lr * g.grad,
        "w_after": lambda: projected_step(w, g.grad, lr, None),
    }
    per_token = {
        "x": lambda: x,
        "y": lambda: y,
        "one": lambda: torch.ones(T, 1, dtype=x.dtype),
        "t": lambda: t,
        "p": lambda: g.p[j],
        "prediction": lambda: g.p[-1],
        "r_prime": lambda: g.r_prime[j - 1],
        "u": lambda: g.u,
        "s": lambda: g.s[j - 1],
        "A": lambda: g.A[j - 1].reshape(1, -1).expand(T, -1),
    }
    if name in flat:
        return flat[name]()[None].expand(T, -1)
    return per_token[name]() if name in per_token else None


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", [0, 1])
def test_every_claim_of_the_ledger_holds_in_the_cache(variant: str, seed: int, assert_nondegenerate) -> None:  # type: ignore[no-untyped-def]
    spec = NetSpec(depth=3, width=2, in_dim=2, out_dim=1)
    n, lr, steps = 5, 0.2, 2
    model = compile_gd_transformer(spec, lr=lr, steps=steps, n=n, variant=variant)
    x, y, xq, w0, _ = sample_task(spec, n, seed=seed)
    assert_nondegenerate(spec, x, y, w0)
    L = ledger(model)
    _, cache = model.run_with_cache(model.build_prompt(x, y, xq, w0))
    traj = reference_gd(spec, "squared", w0, x, y, lr=lr, steps=steps)
    x_all = torch.cat([x, xq[None]])
    y_all = torch.cat([y, torch.zeros(1, spec.out_dim, dtype=y.dtype)])
    pre, rtol = L["prefix_tokens"], RTOL.get(variant, 1e-7)
    checked: set[str] = set()
    index = {sl.label: list(sl.indices) for sl in model.layout.slots}
    for point, slots in L["points"].items():
        for slot, q in slots.items():
            # computed at the weights its step started from (prompt slots: w0; the readout: the last w)
            step = (
                q["step"] if q["step"] is not None else steps if q["written_by"].startswith("readout") else 0
            )
            wq = traj[step]
            if q["quantity"] == "zero":
                want: Tensor | None = torch.zeros(1, dtype=x.dtype)
            else:
                want = _expected(q, spec, wq, x_all, y_all, lr)
            if want is None or q["tokens"] == "prefix":
                continue
            got = cache[point][0, pre:, index[slot]]
            if q["tokens"] == "query":
                got, want = got[-1:], want[-1:]
            scale = 1 + want.abs().max()
            err = float((got - want).abs().max() / scale)
            assert err <= rtol, f"{point} {slot}: {q['label']} off by {err:.3g}"
            checked.add(q["quantity"])
    # the weights after every step's update, wherever the layout keeps them (the rows variant: row tokens)
    for l in range(steps):
        got = model.read_weights(cache[f"steps.{l}.update.hook_out"])[0]
        assert float((got - traj[l + 1]).abs().max() / (1 + traj[l + 1].abs().max())) <= rtol
    assert {"x", "y", "one", "t", "zero"} <= checked
    if variant != "softmax":  # its intermediates are its own surrogates (labelled, quantity "custom")
        assert {"p", "r_prime", "u"} <= checked
    if variant not in ("softmax", "rows"):  # rows keeps z = V^T s and w's rows (custom) instead
        assert checked & {"s", "A"} and checked & {"w_step", "w_after"}
    json.dumps(L)  # JSON-ready


def test_graph_and_label_circuit_of_the_paper_variant() -> None:
    """Depth 2, paper's block: labels enter the loss only (Lemma 4), flow through backward_2 and backward_1
    (Lemma 5) into the update (eq. 3.5); the forward sublayers and the derivative never see them."""
    model = compile_gd_transformer(NetSpec(depth=2, width=3, in_dim=2, out_dim=1), steps=2, n=4)
    L = ledger(model)
    edges = {(e["source"], e["target"]): e["slots"] for e in L["edges"]}
    s0 = "steps.0."
    assert edges[f"{s0}forward_1", f"{s0}forward_2"] == ["P_1"]  # forward_2 reads P_1
    assert "Y" in edges["hook_prompt", f"{s0}loss"]
    # step 1 reads x from the prompt and the updated W from step 0's update
    assert edges["hook_prompt", "steps.1.forward_1"] == ["X", "ONE"]
    assert edges["steps.0.update", "steps.1.forward_1"] == ["W[V_1]"]
    circuit = {tuple(e) for e in label_circuit(model)}
    assert circuit == {
        ("hook_prompt", f"{s0}loss"),
        (f"{s0}loss", f"{s0}backward_2"),
        (f"{s0}backward_2", f"{s0}backward_1"),
        (f"{s0}backward_2", f"{s0}update"),
        (f"{s0}backward_1", f"{s0}update"),
    }
    assert circuit_nodes(circuit) == {f"{s0}{n}" for n in ("loss", "backward_2", "backward_1", "update")}
    # the circuit of p(2) at step 0 is the forward pass only
    p2 = L["circuits"][f"P_2@{s0}forward_2"]["edges"]
    assert {e[1] for e in p2} == {f"{s0}forward_1", f"{s0}forward_2"}


def test_heads_write_what_the_ledger_says() -> None:
    """Each head's recorded writes are exactly the coordinates its hook_result is non-zero on (a random
    prompt; a head whose pattern is zero there writes nothing)."""
    spec = NetSpec(depth=2, width=2, in_dim=2, out_dim=1)
    model = compile_gd_transformer(spec, steps=1, n=4, variant="paper")
    model.use_attn_result = True
    x, y, xq, w0, _ = sample_task(spec, 4, seed=2)
    _, cache = model.run_with_cache(model.build_prompt(x, y, xq, w0))
    L = ledger(model)
    index = {c["label"]: c["index"] for c in L["coordinates"]}
    active = 0
    for h in L["heads"]:
        R = cache[h["point"].format(l=0)][..., h["head"], :]
        nonzero = set(torch.nonzero(R.abs().amax(dim=(0, 1)) > 0).flatten().tolist())
        assert nonzero <= {index[c] for c in h["writes"]}, h
        active += bool(nonzero)
    assert active >= len(L["heads"]) // 2
