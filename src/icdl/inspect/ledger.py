"""The ground-truth ledger of a compiled GD transformer: what every hook point, residual slice and head
holds, and the circuit behind every GD quantity, as plain JSON.

A compiled model is an interpretability ground truth because its algorithm is known: Theorem 1's block runs
one GD step, Lemmas 2-5 say which sublayer computes which term of Lemma 1 (eqs. 3.3-3.7), and the proof of
Theorem 1 adds the update (eq. 2.3) and the clean-up. [`ledger`][icdl.inspect.ledger.ledger] writes that
down from the model itself, so a circuit-discovery method can be scored against it:

* ``coordinates``: every residual coordinate's slot and unit (``P_2[3]``: unit 3 of layer 2's outputs);
* ``points``: for every hook point (``hook_prompt``, ``steps.{l}.{sublayer}.hook_out``, the readout), the
  quantity each slot holds there (``p(2)`` of step l, ``w`` after step l, ``zero`` ...), read from the
  variant's contract ([`icdl.construct.build.contract`][icdl.construct.build.contract], the same list the
  verifier checks), with the sublayer that wrote it;
* ``heads``: for every head of every attention or EWML sublayer, the coordinates (and slots) it reads and
  writes, and its ``hook_result`` point;
* ``edges``: the computational graph, one edge ``A -> B`` per sublayer B and each earlier node A that last
  wrote a coordinate B reads (``hook_prompt`` for the prompt), with the slots it carries;
* ``circuits``: per quantity written in step 0, the edges on a path into its writer; ``label_circuit``:
  the edges that carry the labels ``y`` into step 0's weight update (the gradient circuit, Lemmas 4-5 and
  eq. 3.5): what activation patching with flipped labels should recover
  ([`icdl.inspect.patching`][icdl.inspect.patching]).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from icdl.construct.build.contract import Expect
from icdl.construct.variants.registry import get_variant
from icdl.hooks import PROMPT

if TYPE_CHECKING:
    from icdl.construct.compile import CompiledModel

__all__ = [
    "FORMAT",
    "MEANINGS",
    "circuit_nodes",
    "graph_edges",
    "label_circuit",
    "label_circuit_of",
    "ledger",
    "node_names",
]

FORMAT = "icdl-ledger/1"

MEANINGS: dict[str, str] = {
    "x": "the inputs x_i (the query's x on the last token) (prompt, Theorem 1)",
    "y": "the labels y_i, 0 on the query (prompt)",
    "w": "the network weights w, row-major V_1..V_N (eq. 3.2)",
    "one": "the constant 1 (biases of the sublayers)",
    "t": "1 on the n examples, 0 on the query (Lemma 4's gate)",
    "p": "p(j) = r(V_j p(j-1)), the outputs of layer j (eq. 3.3, Lemma 2)",
    "r_prime": "r'(V_j p(j-1)), the activation's derivative at layer j (Definition 2, Lemma 3)",
    "u": "u = dl/dp(N), the loss derivative; 0 on the query (Definition 3, Lemma 4)",
    "s": "s(j), the backpropagated delta of layer j (eq. 3.6, Lemma 5); 0 on the query",
    "A": "A_j = (1/2n) sum_i s_i(j) p_i(j-1)^T, the gradient block of V_j (eqs. 3.5, 3.7)",
    "grad": "the gradient of the empirical loss, row-major A_1..A_N (eq. 3.5)",
    "w_step": "w - eta grad (eq. 2.3 before the projection)",
    "w_after": "Proj_W(w - eta grad), the weights after this GD step (eq. 2.3)",
    "prediction": "f(w, x) = p(N), the prediction (the readout)",
    "zero": "0: scratch cleared for the next step (proof of Theorem 1)",
    "custom": "an intermediate of this variant (its module's docstring defines it)",
}
"""One line per quantity name a ledger uses."""

_PROMPT_QUANTITY = {"X": "x", "Y": "y", "W": "w", "ONE": "one", "T": "t"}


def node_names(model: CompiledModel, readout: bool = True) -> list[str]:
    """The graph's nodes in forward order: ``hook_prompt``, ``steps.{l}.{sublayer}``, then
    ``readout.{sublayer}``."""
    nodes = [PROMPT] + [f"steps.{l}.{m.info.name}" for l in range(model.steps) for m in model.block_layers]
    return nodes + ([f"readout.{m.info.name}" for m in model.readout_layers] if readout else [])


def _modules(model: CompiledModel) -> list[Any]:
    return [m for _ in range(model.steps) for m in model.block_layers] + list(model.readout_layers)


def _entry(e: Expect, step: int | None, writer: str) -> dict[str, Any]:
    if isinstance(e.quantity, str):
        q = "w_after" if e.quantity == "w" else e.quantity
        label = e.label if e.quantity != "w" else "w_after"
    else:
        q, label = "custom", getattr(e.quantity, "__name__", "custom")
    return {
        "quantity": q,
        "label": label,
        "layer": e.layer,
        "tokens": e.tokens,
        "step": step,
        "written_by": writer,
        "meaning": MEANINGS[q],
    }


def graph_edges(model: CompiledModel) -> list[dict[str, Any]]:
    """``A -> B`` for every node B and each node A that last wrote a coordinate B reads, with the slots
    (``W[V_j]`` blocks for the weights) and coordinates it carries, in forward order of B."""
    labels = model.layout.slot_labels()
    last = [PROMPT] * model.embedding_dim
    edges: list[dict[str, Any]] = []
    for node, m in zip(node_names(model)[1:], _modules(model), strict=True):
        by_source: dict[str, set[int]] = {}
        for c in m.read_coordinates():
            by_source.setdefault(last[c], set()).add(c)
        for src, coords in by_source.items():
            slots = sorted({labels[c] for c in coords}, key=lambda s: labels.index(s))
            edges.append({"source": src, "target": node, "slots": slots, "coords": sorted(coords)})
        for c in m.write_coordinates():
            last[c] = node
    return edges


def _ancestors(edges: Sequence[dict[str, Any]], node: str) -> set[str]:
    into: dict[str, set[str]] = {}
    for e in edges:
        into.setdefault(e["target"], set()).add(e["source"])
    seen, todo = {node}, [node]
    while todo:
        for a in into.get(todo.pop(), ()):
            if a not in seen:
                seen.add(a)
                todo.append(a)
    return seen


def _circuit(edges: Sequence[dict[str, Any]], node: str) -> list[list[str]]:
    up = _ancestors(edges, node)
    return [[e["source"], e["target"]] for e in edges if e["target"] in up]


def label_circuit(model: CompiledModel, step: int = 0) -> list[list[str]]:
    """The edges ``[A, B]`` that carry the labels into the weight update of GD step ``step``: A depends on
    the prompt's ``Y`` slot (the prompt itself only through an edge that carries ``Y``), B is in that step
    and on a path into its ``update`` sublayer. Flipping the labels changes exactly what flows along them
    (Lemma 4: labels enter only through the loss derivative)."""
    return label_circuit_of(graph_edges(model), step)


def label_circuit_of(edges: Sequence[dict[str, Any]], step: int = 0) -> list[list[str]]:
    """[`label_circuit`][icdl.inspect.ledger.label_circuit] from a ledger's ``edges``."""
    dependent: set[str] = set()
    for e in edges:  # forward order of targets: sources are decided before their targets
        if (e["source"] == PROMPT and "Y" in e["slots"]) or e["source"] in dependent:
            dependent.add(e["target"])
    update = f"steps.{step}.update"
    up = _ancestors(edges, update)
    inside = f"steps.{step}."
    return [
        [e["source"], e["target"]]
        for e in edges
        if e["target"] in up
        and e["target"].startswith(inside)
        and (e["source"] in dependent or (e["source"] == PROMPT and "Y" in e["slots"]))
    ]


def circuit_nodes(edges: Sequence[Sequence[str]]) -> set[str]:
    """The sublayers an edge set touches (``hook_prompt`` left out)."""
    return {n for e in edges for n in e} - {PROMPT}


def _head(m: Any, h: int, point: str, entries: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """One head's record: the coordinates (and slots) its value writes, what it reads, its hook point."""
    dst, reads = m.head_write_coordinates(h), m.head_read_coordinates(h)
    return {
        "sublayer": m.info.name,
        "head": h,
        "point": point,
        "writes": [entries[c] for c in dst],
        "write_slots": sorted({labels[c] for c in dst}, key=list(labels).index),
        "reads": [entries[c] for c in reads],
    }


def ledger(model: CompiledModel) -> dict[str, Any]:
    """The model's ground-truth ledger (module docstring), JSON-ready."""
    layout, variant = model.layout, get_variant(model.config.variant)
    labels, entries = layout.slot_labels(), layout.entry_labels()
    coordinates = [
        {"index": c, "label": entries[c], "slot": labels[c], "unit": int(entries[c].rsplit("[", 1)[1][:-1])}
        for c in range(layout.dim)
    ]
    scratch = {s.label for s in layout.scratch_slots()}
    live: dict[str, dict[str, Any]] = {}
    for s in layout.slots:
        if s.label in scratch:
            live[s.label] = {**_entry(Expect(s.label, "zero"), None, PROMPT), "quantity": "zero"}
        else:
            q = _PROMPT_QUANTITY.get(s.name, "custom")
            live[s.label] = {
                "quantity": q,
                "label": s.label.lower() if q == "custom" else q,
                "layer": s.layer,
                "tokens": "all",
                "step": None,
                "written_by": PROMPT,
                "meaning": MEANINGS[q] if q != "custom" else f"the prompt's {s.label} slot (the layout)",
            }
    points: dict[str, dict[str, Any]] = {PROMPT: {k: dict(v) for k, v in live.items()}}
    for node, m in zip(node_names(model)[1:], _modules(model), strict=True):
        step = None if node.startswith("readout.") else int(node.split(".")[1])
        for e in variant.effects(m.info, layout):
            live[e.slot] = _entry(e, step, node)
        points[f"{node}.hook_out"] = {k: dict(v) for k, v in live.items()}
    heads = [
        _head(m, h, f"{where}.{m.info.name}.hook_result", entries, labels)
        for where, layers in (("steps.{l}", model.block_layers), ("readout", model.readout_layers))
        for m in layers
        for h in range(getattr(m, "num_heads", 0))
    ]
    edges = graph_edges(model)
    circuits = {}
    if model.steps:
        for node in node_names(model)[1 : 1 + len(model.block_layers)]:
            m = {x.info.name: x for x in model.block_layers}[node.split(".")[2]]
            for e in variant.effects(m.info, layout):
                if e.quantity != "zero":
                    key = f"{e.slot}@{node}"
                    circuits[key] = {"quantity": _entry(e, 0, node)["label"], "edges": _circuit(edges, node)}
    return {
        "format": FORMAT,
        "variant": model.config.variant,
        "spec": model.spec.to_dict(),
        "steps": model.steps,
        "n": model.n,
        "lr": model.config.lr,
        "loss": model.config.loss,
        "tokens": layout.prefix_tokens + model.n + 1,
        "prefix_tokens": layout.prefix_tokens,
        "embedding_dim": layout.dim,
        "coordinates": coordinates,
        "sublayers": [
            {**m.info.to_dict(), "rewrites": [entries[c] for c in m.rewritten_coords().tolist()]}
            for m in (*model.block_layers, *model.readout_layers)
        ],
        "points": points,
        "heads": heads,
        "edges": [{k: v for k, v in e.items() if k != "coords"} for e in edges],
        "circuits": circuits,
        "label_circuit": label_circuit_of(edges, 0) if model.steps else [],
        "meanings": MEANINGS,
    }
