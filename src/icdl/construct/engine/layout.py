"""Token layouts: named slots of the embedding (the only place where coordinates are computed).

A [`Layout`][icdl.construct.engine.layout.Layout] is an ordered list of named
[`Slot`][icdl.construct.engine.layout.Slot] groups for one *token type*. The paper's construction
(docs/construction.md, "Token layout") has a single token type whose slots are

====  =========================  ==============================================================
slot  size                       content at block start
====  =========================  ==============================================================
X     d_x                        x_i (x_{n+1} on the query token)
Y     d_y                        y_i; 0 on the query (the readout writes the prediction here)
W     P                          w, identical in all tokens; v_jk is the row-major block (j, k)
P_j   n_j (j = 1..N)             0; forward layer j writes p(j)
R_j   n_j                        0; the derivative layer writes r'(j-1) = r'(V_j p(j-1))
G     d_y                        0; the loss MLP writes u(p(N), y) on examples, 0 on the query
S_j   n_j                        0; backward layer j writes s(j)
ONE   1                          1
T     1                          t_i = 1 on examples, 0 on the query
====  =========================  ==============================================================

so ``D = d_x + 2 d_y + P + 3 sum_j n_j + 2``. Other variants (e.g. one that keeps each weight row in its
own token) build other layouts with other slot lists and ``token_type`` names; everything outside this
module addresses coordinates only through [`Layout.slot`][icdl.construct.engine.layout.Layout.slot],
[`Layout.index`][icdl.construct.engine.layout.Layout.index],
[`Layout.w_row`][icdl.construct.engine.layout.Layout.w_row],
[`Layout.w_col`][icdl.construct.engine.layout.Layout.w_col],
[`Layout.w_entry`][icdl.construct.engine.layout.Layout.w_entry] and
[`Layout.p`][icdl.construct.engine.layout.Layout.p].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from icdl.nets import NetSpec, unflatten

__all__ = ["ROWS_SCRATCH", "SCRATCH", "Layout", "RowsLayout", "Slot", "paper_layout"]

# Slot groups that a block fills and its last MLP zeroes again.
SCRATCH = ("P", "R", "G", "S")


@dataclass(frozen=True)
class Slot:
    """A contiguous group of coordinates: ``name`` (and network layer ``layer`` for P/R/S), ``size`` wide."""

    name: str
    layer: int | None
    offset: int
    size: int

    @property
    def label(self) -> str:
        return self.name if self.layer is None else f"{self.name}_{self.layer}"

    @property
    def indices(self) -> range:
        return range(self.offset, self.offset + self.size)


class Layout:
    """Named slots of one token type, plus W-addressing for the network ``spec``.

    Args:
        spec: the network whose parameters live in the ``W`` slot (row-major ``V_1 .. V_N``, eq. 3.2).
        groups: ``(name, layer, size)`` in embedding order.
        token_type: a name for this kind of token (``"token"`` for the paper's single type).
        scratch: names of the slot groups a block fills and its last sublayer zeroes again.
    """

    def __init__(
        self,
        spec: NetSpec,
        groups: list[tuple[str, int | None, int]],
        token_type: str = "token",
        scratch: tuple[str, ...] = SCRATCH,
    ) -> None:
        self.spec = spec
        self.token_type = token_type
        self.scratch = tuple(scratch)
        slots: list[Slot] = []
        off = 0
        for name, layer, size in groups:
            if size < 1:
                raise ValueError(f"slot {name}_{layer} has size {size}")
            slots.append(Slot(name, layer, off, size))
            off += size
        self.slots: tuple[Slot, ...] = tuple(slots)
        self.dim = off
        self._by_key = {(s.name, s.layer): s for s in slots}
        if len(self._by_key) != len(slots):
            raise ValueError("duplicate slot names in layout")

    # -- tokens and where the weights live ------------------------------------------------------------
    # A layout may put tokens of other types *before* the n + 1 data tokens (e.g. one token per weight
    # row); the data tokens (examples, then the query last) always come last. The paper's layout has
    # none and keeps w in the W slot of every token; a layout with prefix tokens overrides the three
    # methods below.
    @property
    def prefix_tokens(self) -> int:
        """Number of tokens before the n + 1 data tokens (0 for the paper's layout)."""
        return 0

    def write_weights(self, H: Tensor, w: Tensor) -> None:
        """Write the weights ``w`` (B, P) into the prompt ``H`` (B, T, D) in place (every token's W slot)."""
        H[:, :, self.indices("W")] = w.to(H.dtype)[:, None, :]

    def read_weights(self, H: Tensor, token: int = -1) -> Tensor:
        """The weights held by ``H`` (..., T, D) -> (..., P): the W slot of token ``token``."""
        return H[..., token, self.indices("W")]

    def weight_copies(self, H: Tensor) -> Tensor:
        """Every copy of w in one state ``H`` (T, D) -> (copies, P) (the verifier checks they agree)."""
        return H[:, self.indices("W")]

    # -- generic addressing -------------------------------------------------------------------------
    def has(self, name: str, layer: int | None = None) -> bool:
        return (name, layer) in self._by_key

    def slot(self, name: str, layer: int | None = None) -> Slot:
        """The slot ``name`` (``layer`` j for P, R, S)."""
        try:
            return self._by_key[(name, layer)]
        except KeyError:
            lab = name if layer is None else f"{name}_{layer}"
            raise KeyError(f"layout has no slot {lab}") from None

    def index(self, name: str, layer: int | None = None, k: int = 0) -> int:
        """Coordinate of entry ``k`` (0-based) of slot ``name``/``layer``."""
        s = self.slot(name, layer)
        if not 0 <= k < s.size:
            raise IndexError(f"entry {k} outside slot {s.label} of size {s.size}")
        return s.offset + k

    def indices(self, name: str, layer: int | None = None) -> list[int]:
        return list(self.slot(name, layer).indices)

    def entry_labels(self) -> list[str]:
        """Label of every coordinate (length D) with its entry in the slot, e.g. ``"P_2[3]"``."""
        out: list[str] = []
        for s in self.slots:
            out += [f"{s.label}[{k}]" for k in range(s.size)]
        return out

    def slot_labels(self) -> tuple[str, ...]:
        """Slot label of every coordinate (length D), e.g. ``"P_2"``; W coordinates are labelled by their
        block, ``"W[V_j]"``. Sublayers derive the slots they read and write from these
        ([`icdl.construct.engine.layers.Role`][icdl.construct.engine.sublayers.Role])."""
        out: list[str] = []
        for s in self.slots:
            if s.name == "W" and s.size == self.spec.num_params:
                for j in range(1, self.spec.depth + 1):
                    rows, cols = self.spec.shapes[j - 1]
                    out += [f"W[V_{j}]"] * (rows * cols)
            else:
                out += [s.label] * s.size
        return tuple(out)

    def scratch_indices(self) -> list[int]:
        """Every coordinate of the scratch slots (P, R, G, S in the paper's layout)."""
        return [i for s in self.scratch_slots() for i in s.indices]

    def scratch_slots(self) -> list[Slot]:
        return [s for s in self.slots if s.name in self.scratch]

    # -- network addressing ------------------------------------------------------------------------
    def p(self, j: int) -> list[int]:
        """Coordinates of ``p(j)``: the X slot for ``j = 0`` (``p(0) = x``), else ``P_j``."""
        return self.indices("X") if j == 0 else self.indices("P", j)

    def w_entry(self, j: int, k: int, l: int) -> int:
        """Coordinate of ``v_jk[l] = V_j[k, l]`` (1-based layer j, 0-based row k and column l)."""
        rows, cols = self.spec.shapes[j - 1]
        if not (0 <= k < rows and 0 <= l < cols):
            raise IndexError(f"V_{j}[{k}, {l}] outside shape {(rows, cols)}")
        return self.index("W", None, self.spec.offsets[j - 1] + k * cols + l)

    def w_row(self, j: int, k: int) -> list[int]:
        """Coordinates of row ``v_jk`` (the W-block the paper's K-matrices read, Lemma 2)."""
        return [self.w_entry(j, k, l) for l in range(self.spec.shapes[j - 1][1])]

    def w_col(self, j: int, l: int) -> list[int]:
        """Coordinates of column l of ``V_j``, i.e. ``(v_j1[l], ..., v_j{n_j}[l])`` (Lemma 5, (C.15))."""
        return [self.w_entry(j, k, l) for k in range(self.spec.shapes[j - 1][0])]

    # -- (de)serialisation ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "token_type": self.token_type,
            "dim": self.dim,
            "scratch": list(self.scratch),
            "slots": [
                {"name": s.name, "layer": s.layer, "offset": s.offset, "size": s.size} for s in self.slots
            ],
        }

    @classmethod
    def from_dict(cls, spec: NetSpec, d: dict[str, Any]) -> Layout:
        groups = [(s["name"], s["layer"], s["size"]) for s in d["slots"]]
        out = cls(spec, groups, d["token_type"], tuple(d.get("scratch", SCRATCH)))
        if out.dim != d["dim"]:
            raise ValueError("layout dimension mismatch")
        return out

    def table(self) -> str:
        """A readable table of the slots."""
        rows = [f"{'slot':<8} {'offset':>7} {'size':>6}"]
        rows += [f"{s.label:<8} {s.offset:>7} {s.size:>6}" for s in self.slots]
        rows.append(f"{'D':<8} {'':>7} {self.dim:>6}")
        return "\n".join(rows)


def paper_layout(spec: NetSpec) -> Layout:
    """The paper's single-token-type layout (slots as in docs/construction.md): X, Y, W,
    P_1..P_N, R_1..R_N, G, S_1..S_N, ONE, T."""
    n = spec.widths
    N = spec.depth
    groups: list[tuple[str, int | None, int]] = [
        ("X", None, spec.in_dim),
        ("Y", None, spec.out_dim),
        ("W", None, spec.num_params),
    ]
    groups += [("P", j, n[j]) for j in range(1, N + 1)]
    groups += [("R", j, n[j]) for j in range(1, N + 1)]
    groups.append(("G", None, spec.out_dim))
    groups += [("S", j, n[j]) for j in range(1, N + 1)]
    groups += [("ONE", None, 1), ("T", None, 1)]
    return Layout(spec, groups, token_type="token")


# Scratch of the rows layout: the paper's plus Z_j = V_{j+1}^T s(j+1) (icdl.construct.variants.rows).
ROWS_SCRATCH = (*SCRATCH, "Z")


class RowsLayout(Layout):
    """Data slots plus row-token slots; the ``(N-1)K + d_y`` row tokens come first (layer 1's rows, then
    layer 2's ...), then the n examples and the query."""

    @property
    def prefix_tokens(self) -> int:
        return self.spec.num_units

    def row_offset(self, j: int) -> int:
        """Token index of row (j, 0)."""
        return sum(self.spec.widths[1:j])

    def write_weights(self, H: Tensor, w: Tensor) -> None:
        """Row token (j, k): ``V_j = v_jk``, ``ID_j[k] = 1``, ``ROW_j = 1``."""
        for j, V in enumerate(unflatten(self.spec, w.to(H.dtype)), start=1):
            o, rows = self.row_offset(j), V.shape[-2]
            t = torch.arange(o, o + rows)
            H[:, o : o + rows, self.indices("V", j)] = V
            H[:, t, self.slot("ID", j).offset + torch.arange(rows)] = 1.0
            H[:, o : o + rows, self.index("ROW", j)] = 1.0

    def read_weights(self, H: Tensor, token: int = -1) -> Tensor:
        """w (row-major ``V_1 .. V_N``) gathered from the row tokens; ``token`` is ignored (one copy)."""
        parts = []
        for j in range(1, self.spec.depth + 1):
            o, rows = self.row_offset(j), self.spec.widths[j]
            V = H[..., o : o + rows, :][..., self.indices("V", j)]
            parts.append(V.reshape(*V.shape[:-2], -1))
        return torch.cat(parts, dim=-1)

    def weight_copies(self, H: Tensor) -> Tensor:
        return self.read_weights(H)[None]

    def row_values(self, w: Tensor, j: int, dtype: torch.dtype) -> Tensor:
        """The V_j slot of every prefix token for weights w (P,): ``v_jk`` on row (j, k), 0 elsewhere."""
        out = torch.zeros(self.prefix_tokens, self.spec.widths[j - 1], dtype=dtype)
        o, rows = self.row_offset(j), self.spec.widths[j]
        out[o : o + rows] = unflatten(self.spec, w)[j - 1]
        return out

    def z_source(self, j: int) -> tuple[str, int | None]:
        """The slot holding ``z_j`` (whose product with r'(j) is s(j)): G for j = N, else Z_j."""
        return ("G", None) if j == self.spec.depth else ("Z", j)
