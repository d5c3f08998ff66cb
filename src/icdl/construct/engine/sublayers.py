"""Compact coefficient tables of the sublayers ([`HeadTable`][icdl.construct.engine.sublayers.HeadTable],
[`UnitTable`][icdl.construct.engine.sublayers.UnitTable]) and their base classes
([`Sublayer`][icdl.construct.engine.sublayers.Sublayer],
[`HeadSublayer`][icdl.construct.engine.sublayers.HeadSublayer]); the sublayer types are in
[`icdl.construct.engine.layers`][icdl.construct.engine.layers].

Compact weights (why: a sigmoid construction has thousands of heads, each touching a handful of the D
coordinates, so dense ``D x D`` matrices per head would be absurd). A head ``m`` of width ``d_h`` stores

* ``q_idx, q_coef`` of shape ``(M, d_h)``: ``(Q_m h)[r] = q_coef[m, r] * h[q_idx[m, r]]``;
* ``k_idx, k_coef`` likewise for ``K_m``;
* ``v_src, v_dst, v_coef`` of shape ``(M, E)``: ``V_m h = sum_e v_coef[m, e] h[v_src[m, e]] e_{v_dst[m, e]}``.

An MLP hidden unit ``u`` stores its reads ``w1_idx, w1_coef`` (``(U, r)``) and writes ``w2_dst, w2_coef``
(``(U, o)``). Rows are padded with zero coefficients (index 0); a zero coefficient contributes an exact 0.

Floating-point order is part of the contract, because the compiled GD transformer relies on exact
cancellations (the relu' delta-step and the query gate, docs/construction.md):

* the **last** Q/K read pair of every head is added to the score last (builders put the bias
  ``b * ONE · ONE`` there), so that two heads with the same leading reads get scores ``X`` and ``X + b``;
* MLP pre-activations are accumulated read by read **in the stored order** (builders put the gate first);
* `ReLUAttention` with ``accumulate="heads"`` sums the heads writing one coordinate for each
  (query, key) pair *before* summing over the keys, so ``relu(X) - relu(X - 1) = 1`` stays exact even when
  ``X`` is ~1e9; ``accumulate="tokens"`` (default) sums over keys per head first, which is faster.

Heads are processed in chunks so that no ``(B, heads, T, T)`` score tensor exceeds ``max_chunk_elems``.

Speed without changing a bit: per sublayer, gather and scatter plans (stacked index tables, flat MLP
indices) are built once per prompt shape, dtype and device and cached
([`Sublayer.cached_plan`][icdl.construct.engine.sublayers.Sublayer.cached_plan]; the cache follows in-place
edits of the tables and is not part of ``state_dict``); the slots a table reads are gathered from the state
itself, each distinct ``(slot, coefficient)`` product once (heads sharing their queries read them once);
scores are added pair by pair into one running sum (no ``(heads, d_h, ...)`` product tensor); heads that
differ only in their last pair share their leading partial score; only the written coordinates are computed
and added, the rest copied (into a reused buffer under ``CompiledModel.run``); the kernels are in
``icdl.construct.engine.kernels``. Every sublayer's output equals the plain loops' bit for bit. All modules
work in any floating dtype; use float64 to verify constructions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from icdl.construct.engine.kernels import (
    Rows,
    flat_index_fits,
    ordered_dot,
    ordered_sum,
    same_tokens,
    slot_index,
    slot_rows,
    stacked_fits,
)
from icdl.sublayer import SublayerInfo, SublayerKind

__all__ = [
    "DEFAULT_CHUNK_ELEMS",
    "Accumulate",
    "HeadSublayer",
    "HeadTable",
    "Role",
    "Sublayer",
    "UnitTable",
]

Accumulate = Literal["tokens", "heads"]
Read = tuple[int, float]
Write = tuple[int, int, float]

DEFAULT_CHUNK_ELEMS = 1 << 22  # 4M entries of a score tensor: 32 MB in float64
#: a same-tokens check of more entries than this first compares each prompt's second token with its first
#: (`HeadSublayer._same_tokens`)
SAME_PRECHECK_ELEMS = 1 << 15


# --------------------------------------------------------------------------------------------------
# Builders of the compact tables (plain Python lists -> padded tensors)
# --------------------------------------------------------------------------------------------------


class HeadTable:
    """Collects heads as sparse reads/writes and packs them into padded tensors.

    ``add(q, k, v)``: ``q`` and ``k`` are lists of ``(slot, coef)`` of equal length (the score is
    ``sum_r q_coef[r] h_i[q_slot[r]] * k_coef[r] h_s[k_slot[r]]``; the last pair is added last); ``v`` is a
    list of ``(src, dst, coef)``.
    """

    def __init__(self) -> None:
        self.q: list[list[Read]] = []
        self.k: list[list[Read]] = []
        self.v: list[list[Write]] = []

    def add(self, q: Sequence[Read], k: Sequence[Read], v: Sequence[Write]) -> None:
        if len(q) != len(k) or not q:
            raise ValueError(f"a head needs equal, non-empty Q and K reads, got {len(q)} and {len(k)}")
        if not v:
            raise ValueError("a head needs at least one value entry")
        self.q.append([(int(i), float(c)) for i, c in q])
        self.k.append([(int(i), float(c)) for i, c in k])
        self.v.append([(int(s), int(d), float(c)) for s, d, c in v])

    def __len__(self) -> int:
        return len(self.q)

    def tensors(self, dtype: torch.dtype = torch.float64) -> dict[str, Tensor]:
        """Padded tables; Q/K rows are padded at the *front* so that each head's last pair stays last."""
        if not self.q:
            raise ValueError("no heads")
        dh = max(len(r) for r in self.q)
        ne = max(len(r) for r in self.v)

        def front_pad(rows: list[list[Read]]) -> tuple[Tensor, Tensor]:
            idx = [[0] * (dh - len(r)) + [i for i, _ in r] for r in rows]
            coef = [[0.0] * (dh - len(r)) + [c for _, c in r] for r in rows]
            return torch.tensor(idx, dtype=torch.long), torch.tensor(coef, dtype=dtype)

        q_idx, q_coef = front_pad(self.q)
        k_idx, k_coef = front_pad(self.k)
        v_src = torch.tensor([[s for s, _, _ in r] + [0] * (ne - len(r)) for r in self.v], dtype=torch.long)
        v_dst = torch.tensor([[d for _, d, _ in r] + [0] * (ne - len(r)) for r in self.v], dtype=torch.long)
        v_coef = torch.tensor([[c for _, _, c in r] + [0.0] * (ne - len(r)) for r in self.v], dtype=dtype)
        return {
            "q_idx": q_idx,
            "q_coef": q_coef,
            "k_idx": k_idx,
            "k_coef": k_coef,
            "v_src": v_src,
            "v_dst": v_dst,
            "v_coef": v_coef,
        }


class UnitTable:
    """Collects MLP hidden units: ``add(reads, writes)`` with reads ``[(slot, coef)]`` (accumulated in this
    order) and writes ``[(dst, coef)]``."""

    def __init__(self) -> None:
        self.reads: list[list[Read]] = []
        self.writes: list[list[Read]] = []

    def add(self, reads: Sequence[Read], writes: Sequence[Read]) -> None:
        if not reads or not writes:
            raise ValueError("an MLP unit needs at least one read and one write")
        self.reads.append([(int(i), float(c)) for i, c in reads])
        self.writes.append([(int(i), float(c)) for i, c in writes])

    def __len__(self) -> int:
        return len(self.reads)

    def tensors(self, dtype: torch.dtype = torch.float64) -> dict[str, Tensor]:
        """Padded tables; reads are padded at the *end* (a trailing ``+ 0`` leaves the sum unchanged)."""
        if not self.reads:
            raise ValueError("no units")
        r = max(len(x) for x in self.reads)
        o = max(len(x) for x in self.writes)

        def pad(rows: list[list[Read]], width: int) -> tuple[Tensor, Tensor]:
            idx = [[i for i, _ in x] + [0] * (width - len(x)) for x in rows]
            coef = [[c for _, c in x] + [0.0] * (width - len(x)) for x in rows]
            return torch.tensor(idx, dtype=torch.long), torch.tensor(coef, dtype=dtype)

        w1_idx, w1_coef = pad(self.reads, r)
        w2_dst, w2_coef = pad(self.writes, o)
        return {"w1_idx": w1_idx, "w1_coef": w1_coef, "w2_dst": w2_dst, "w2_coef": w2_coef}


# --------------------------------------------------------------------------------------------------
# Shared machinery
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Role:
    """What a sublayer is for, as its builder states it: the rest of its
    [`SublayerInfo`][icdl.sublayer.SublayerInfo] (kind, sizes, slots read and written) is derived from its own
    tables.

    Attributes:
        name: unique inside its block (default: ``role`` or ``role_layer``).
        role: what it computes (``forward``, ``loss`` ...).
        lemma: where the paper (or docs/construction.md) builds it.
        layer: the network layer j it serves, else None.
    """

    role: str
    lemma: str = ""
    layer: int | None = None
    name: str = ""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return self.role if self.layer is None else f"{self.role}_{self.layer}"


def _coord_labels(coords: Tensor, labels: Sequence[str] | None) -> tuple[str, ...]:
    """Distinct labels of the coordinates ``coords`` in embedding order (``h[i]`` without labels)."""
    out: list[str] = []
    for i in sorted(set(coords.reshape(-1).tolist())):
        lab = f"h[{i}]" if labels is None else labels[i]
        if lab not in out:
            out.append(lab)
    return tuple(out)


class Sublayer(nn.Module):
    """Base class: registers the compact tables as buffers (so ``state_dict`` holds them), counts them and
    describes itself (``info``, derived from the tables and the builder's
    [`Role`][icdl.construct.engine.sublayers.Role])."""

    TABLES: tuple[str, ...] = ()
    INDEX_TABLES: frozenset[str] = frozenset()
    KIND: ClassVar[SublayerKind]
    # Whether ``forward(H, out=buffer)`` writes the new state into a given buffer (of H's shape, not
    # aliasing H) instead of a fresh tensor ([`CompiledModel.run`][icdl.construct.compile.CompiledModel.run]
    # with ``reuse=True``).
    WRITES_INTO: ClassVar[bool] = False

    def delta(self, H: Tensor) -> tuple[Tensor, Tensor] | None:
        """This sublayer's effect on ``H (B, T, D)`` as additions at fixed places: flat positions ``idx``
        into ``H.reshape(-1)`` and the ``values`` added there, such that ``H`` with
        ``index_add_(0, idx, values)`` applied is ``forward(H)`` bit for bit (the same additions in the same
        order); None where the sublayer, at this prompt size, has no such form. A sublayer with one is run in
        place by [`CompiledModel.run`][icdl.construct.compile.CompiledModel.run] (``inplace``), and the
        streaming check compares only the positions it wrote."""
        return None

    def __init__(
        self,
        tables: dict[str, Tensor],
        dim: int,
        *,
        role: Role | None = None,
        labels: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        missing = set(self.TABLES) - set(tables)
        if missing:
            raise ValueError(f"{type(self).__name__}: missing tables {sorted(missing)}")
        self.dim = int(dim)
        for name in self.TABLES:
            t = tables[name]
            if name in self.INDEX_TABLES:
                t = t.to(torch.long)
                if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.dim):
                    raise ValueError(f"{type(self).__name__}.{name}: slot index outside [0, {self.dim})")
            self.register_buffer(name, t.contiguous())
        if labels is not None and len(labels) != self.dim:
            raise ValueError(f"{type(self).__name__}: {len(labels)} coordinate labels for dim {self.dim}")
        self.role = role if role is not None else Role(self.KIND)
        self.info: SublayerInfo = self._describe(labels)

    def _describe(self, labels: Sequence[str] | None) -> SublayerInfo:
        """This sublayer's description; every size and slot field comes from its own tables."""
        return SublayerInfo(
            name=self.role.label,
            role=self.role.role,
            kind=self.KIND,
            lemma=self.role.lemma,
            layer=self.role.layer,
            heads=self._heads(),
            hidden=self._hidden(),
            score_dim=self._score_dim(),
            value_dim=self._value_dim(),
            reads=_coord_labels(self._read_coords(), labels),
            writes=_coord_labels(self._write_coords(), labels),
        )

    def _heads(self) -> int:
        return 0

    def _hidden(self) -> int:
        return 0

    def _score_dim(self) -> int:
        return 0

    def _value_dim(self) -> int:
        return 0

    def _read_coords(self) -> Tensor:
        raise NotImplementedError

    def _write_coords(self) -> Tensor:
        raise NotImplementedError

    # Names of the dense matrices `dense` returns, in order (icdl.inspect.dense_sublayer's keys).
    DENSE: ClassVar[tuple[str, ...]] = ()

    def dense(self) -> tuple[Tensor, ...]:
        """The sublayer as the paper writes it: dense matrices named by `DENSE` (small D only)."""
        raise NotImplementedError

    def dense_entries(self) -> int:
        """Number of entries of `dense` (to refuse exports that would not fit in memory)."""
        raise NotImplementedError

    def pattern(self, H: Tensor, head: int) -> Tensor:
        """Attention weights of one head on ``H (B, T, D)``, ``(B, T_query, T_key)``; only head sublayers
        have them."""
        raise TypeError(f"{type(self).__name__} has no attention heads")

    def read_coordinates(self) -> list[int]:
        """The residual coordinates this sublayer reads (a non-zero coefficient), sorted."""
        return sorted(set(self._read_coords().tolist()))

    def write_coordinates(self) -> list[int]:
        """The residual coordinates this sublayer writes (a non-zero coefficient), sorted."""
        return sorted(set(self._write_coords().tolist()))

    def rewritten_coords(self) -> Tensor:
        """The coordinates this sublayer *rewrites*: it reads them and writes them (sorted, unique).

        Everywhere else it adds to the stream, ``out = H + f(H)`` with ``f`` independent of what it adds
        to; here the new value replaces the old one (``project`` clears scratch, ``backward_mask`` turns
        ``S`` into ``r' ⊙ S``), so what it "adds" there is a function of the value it overwrites. The
        ``hook_write`` point ([`icdl.hooks`][icdl.hooks]) holds the new value on these coordinates.
        """
        both = set(self.read_coordinates()) & set(self.write_coordinates())
        return torch.tensor(sorted(both), dtype=torch.long)

    def dense_parameters(self) -> int:
        """Parameters of the paper's dense form of this sublayer."""
        raise NotImplementedError

    def _check(self, H: Tensor) -> None:
        if H.dim() != 3 or H.shape[-1] != self.dim:
            raise ValueError(f"expected H of shape (B, T, {self.dim}), got {tuple(H.shape)}")

    def _added(self, H: Tensor, out: Tensor | None, d: tuple[Tensor, Tensor]) -> Tensor:
        """``H`` (copied, into ``out`` when given) with the additions ``d = (idx, values)`` of
        [`delta`][icdl.construct.engine.sublayers.Sublayer.delta]: the forward of a sublayer that has one."""
        new = self._copy(H, out)
        new.view(-1).index_add_(0, *d)
        return new

    @staticmethod
    def _copy(H: Tensor, out: Tensor | None) -> Tensor:
        """A contiguous copy of ``H``: into ``out`` when given (a state buffer reused across sublayers,
        which saves a fresh allocation of the whole state per sublayer), else a new tensor."""
        if out is None:
            return H.clone(memory_format=torch.contiguous_format)
        if out.shape != H.shape or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous tensor of shape {tuple(H.shape)}")
        return out.copy_(H)

    def coefficient_tables(self) -> list[Tensor]:
        return [getattr(self, n) for n in self.TABLES if n not in self.INDEX_TABLES]

    def stored_coefficients(self) -> int:
        """Number of stored coefficients (padding included): what this compact sublayer holds."""
        return sum(t.numel() for t in self.coefficient_tables())

    def nonzero_coefficients(self) -> int:
        """Non-zero coefficients = non-zero entries of the equivalent dense matrices."""
        return sum(int((t != 0).sum()) for t in self.coefficient_tables())

    def cached_plan(self, H: Tensor, build: Callable[[], Any]) -> Any:
        """``build()``, cached per prompt shape, dtype, device and memory bound; rebuilt when a table was
        modified in place (its version counter moved), so edited or ablated tables are always honoured. The
        cache (the latest plan only) is not part of ``state_dict``."""
        buffers = self._buffers  # direct access: this runs on every forward
        versions = tuple([buffers[n]._version for n in self.TABLES])  # type: ignore[union-attr]
        key = (H.shape, H.dtype, H.device, versions, self.__dict__.get("max_chunk_elems"))
        last = self.__dict__.get("_plan_cache")
        if last is None or last[0] != key:
            last = (key, build())
            self.__dict__["_plan_cache"] = last
        return last[1]


class HeadSublayer(Sublayer):
    """Base of the head-table sublayers (attention, EWML): the Q/K/V tables of
    [`HeadTable`][icdl.construct.engine.sublayers.HeadTable], their sizes, reads and writes, and the dense
    per-head form."""

    TABLES = ("q_idx", "q_coef", "k_idx", "k_coef", "v_src", "v_dst", "v_coef")
    q_idx: Tensor
    q_coef: Tensor
    k_idx: Tensor
    k_coef: Tensor
    v_src: Tensor
    v_dst: Tensor
    v_coef: Tensor
    INDEX_TABLES = frozenset({"q_idx", "k_idx", "v_src", "v_dst"})

    def __init__(
        self,
        tables: dict[str, Tensor],
        dim: int,
        max_chunk_elems: int = DEFAULT_CHUNK_ELEMS,
        *,
        role: Role | None = None,
        labels: Sequence[str] | None = None,
    ):
        super().__init__(tables, dim, role=role, labels=labels)
        M, dh = self.q_idx.shape
        if self.k_idx.shape != (M, dh) or self.v_src.shape[0] != M or self.v_dst.shape != self.v_src.shape:
            raise ValueError(f"{type(self).__name__}: inconsistent head table shapes")
        self.max_chunk_elems = int(max_chunk_elems)

    def _stacked(self, H: Tensor, names: tuple[str, ...]) -> tuple[Tensor, Tensor, list[int]]:
        """The ``(idx, coef)`` tables ``names`` (e.g. ``("k", "v")``) stacked row-wise into one gather, with
        the number of rows of each (cached per prompt shape, dtype and device)."""

        def build() -> tuple[Tensor, Tensor, list[int]]:
            cols = {"q": ("q_idx", "q_coef"), "k": ("k_idx", "k_coef"), "v": ("v_src", "v_coef")}
            idx = [getattr(self, cols[n][0]).reshape(-1) for n in names]
            coef = [getattr(self, cols[n][1]).reshape(-1).to(H.dtype) for n in names]
            sizes = [i.numel() for i in idx]
            return torch.cat(idx).to(H.device), torch.cat(coef)[:, None].to(H.device), sizes

        plans: dict[tuple[str, ...], Any] = self.cached_plan(H, dict)
        if names not in plans:
            plans[names] = build()
        return plans[names]

    def _gather_stacked(self, H: Tensor, names: tuple[str, ...], first_token: bool = False) -> list[Tensor]:
        """`gather` of several tables in one ``index_select`` of ``H (B, T, D)`` (the same products
        ``coef * h``; ``first_token``: of each prompt's first token only); returns ``(rows, B*T)`` blocks, one
        per table."""
        idx, coef, sizes = self._stacked(H, names)
        return list(slot_rows(H, idx, first_token).mul_(coef).split(sizes))

    def _unique_reads(self, H: Tensor, names: tuple[str, ...]) -> tuple[Tensor, Tensor, list[Tensor]]:
        """The distinct ``(slot, coef)`` pairs of the tables ``names`` (``uidx (n,)``, ``ucoef (n, 1)``) and,
        per table, each entry's row among them, shaped like the table (cached)."""

        def build() -> tuple[Tensor, Tensor, list[Tensor]]:
            idx, coef, sizes = self._stacked(H, names)
            # the coefficients' bits (not their values: -0.0 and 0.0, or two NaNs, give different products);
            # (slot, coefficient) pairs as one integer key (a 1-D unique, much faster than rows)
            bits = coef[:, 0].to(torch.float64).view(torch.int64).cpu()
            ucoef_bits, cid = torch.unique(bits, return_inverse=True)
            uniq, inv = torch.unique(idx.cpu() * ucoef_bits.numel() + cid, return_inverse=True)
            shapes = {"q": self.q_idx.shape, "k": self.k_idx.shape, "v": self.v_src.shape}
            invs = [i.reshape(shapes[n]).to(H.device) for n, i in zip(names, inv.split(sizes), strict=True)]
            first = torch.full((uniq.shape[0],), inv.numel(), dtype=torch.long)
            first.scatter_reduce_(0, inv, torch.arange(inv.numel()), reduce="amin")
            return idx[first.to(idx.device)], coef[first.to(coef.device)], invs

        plans: dict[tuple[str, ...], Any] = self.cached_plan(H, dict)
        key = ("unique", *names)
        if key not in plans:
            plans[key] = build()
        return plans[key]

    def _gather_rows(
        self,
        H: Tensor,
        names: tuple[str, ...],
        first_token: bool = False,
        plans: dict[Any, Any] | None = None,
        Hf: Tensor | None = None,
    ) -> list[Rows]:
        """`_gather_stacked` as [`Rows`][icdl.construct.engine.kernels.Rows]: each distinct ``coef *
        h[slot]`` product computed once (the same products, so the same bits), in one flat
        ``index_select`` and one multiplication (``plans``: this prompt shape's plan dict, when the caller
        holds it already)."""
        plans = self.cached_plan(H, dict) if plans is None else plans
        key = ("rows", first_token, *names)
        if key not in plans:
            uidx, ucoef, invs = self._unique_reads(H, names)
            fits = flat_index_fits(H.shape, uidx.numel(), first_token)
            flat = slot_index(H.shape, uidx, first_token) if fits else None
            plans[key] = (uidx, flat, ucoef.reshape(-1, 1), [(i, i.reshape(-1)) for i in invs])
        uidx, flat, ucoef, invs = plans[key]
        B = H.shape[0]
        if flat is not None and Hf is not None:  # the caller's flat view of H
            rows = Hf.index_select(0, flat).view(ucoef.shape[0], -1).mul_(ucoef)
        else:
            rows = slot_rows(H, uidx, first_token, flat).mul_(ucoef)
        base = rows.view(ucoef.shape[0], B, -1)
        return [Rows(base, inv, rows, inv_flat) for inv, inv_flat in invs]

    def _same_tokens(
        self, H: Tensor, name: str, slots: Tensor, plans: dict[Any, Any], flat: Tensor | None = None
    ) -> bool:
        """[`same_tokens`][icdl.construct.engine.kernels.same_tokens] of ``slots`` (named ``name`` in the
        plan), as one comparison of two flat gathers: the slots of every token against its prompt's first
        token's, repeated (built once per prompt shape)."""
        if H.requires_grad and torch.is_grad_enabled():
            return False
        if not flat_index_fits(H.shape, slots.numel()):
            return same_tokens(H, slots)
        key = ("same", name)
        if key not in plans:
            B, T, _ = H.shape
            first = slot_index(H.shape, slots, True)
            # large checks compare each prompt's second token first: one that fails (data slots) fails
            # there, cheaply; small ones are cheaper as one comparison (per-call overhead)
            big = T > 1 and first.numel() * T > SAME_PRECHECK_ELEMS
            second = first + H.shape[-1] if big else None
            every_first = first.view(-1, B, 1).expand(-1, B, T).reshape(-1)
            plans[key] = (slot_index(H.shape, slots), every_first, first, second)
        every, every_first, first, second = plans[key]
        flat = H.reshape(-1) if flat is None else flat  # the caller's view, when it has one
        if second is not None and not torch.equal(flat.index_select(0, second), flat.index_select(0, first)):
            return False
        return torch.equal(flat.index_select(0, every), flat.index_select(0, every_first))

    def _query_slots(self, H: Tensor, plans: dict[Any, Any] | None = None) -> Tensor:
        """The distinct slots the queries read with a non-zero coefficient (cached; follows in-place table
        edits)."""
        plans = self.cached_plan(H, dict) if plans is None else plans
        if "q_slots" not in plans:
            plans["q_slots"] = torch.unique(self.q_idx[self.q_coef != 0]).to(H.device)
        return plans["q_slots"]

    def _destinations(
        self, H: Tensor, plans: dict[Any, Any] | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """The distinct written coordinates ``udst`` (U,), each value entry's index among them (M*E,) and,
        for ``accumulate="heads"`` only (the "tokens" path scatters by index), the dense 0/1 selection matrix
        (U, M*E) (cached; follows in-place table edits). Dense: an update sublayer writing P weights would
        hold P x 2P float64 for nothing (5.3 GiB for the paper layout at N=6, K=64)."""
        plans = self.cached_plan(H, dict) if plans is None else plans
        heads = getattr(self, "accumulate", "tokens") == "heads"
        if "dst" not in plans or (heads and plans["dst"][2] is None):
            dst = self.v_dst.reshape(-1)
            udst, inv = torch.unique(dst, return_inverse=True)
            select = None
            if heads:
                select = torch.zeros(dst.numel(), udst.numel(), dtype=H.dtype)
                select[torch.arange(dst.numel()), inv] = 1.0
                select = select.to(H.device).t()
            plans["dst"] = (udst.to(H.device), inv.to(H.device), select)
        return plans["dst"]

    def forward(self, H: Tensor, out: Tensor | None = None) -> Tensor:
        """``H`` plus what the heads write (`_written`), copied into ``out`` when given."""
        self._check(H)
        plans: dict[Any, Any] = self.cached_plan(H, dict)
        return self._write(H, self._written(H, plans), out, plans)

    def delta(self, H: Tensor) -> tuple[Tensor, Tensor] | None:
        """What the sublayer adds, as flat positions of ``H.reshape(-1)`` and values
        ([`Sublayer.delta`][icdl.construct.engine.sublayers.Sublayer.delta]): the U written coordinates of
        every token, where they are few (`DELTA_ELEMS`; ``CompiledModel.run`` then adds them in the state
        itself), else None (a copy of the state with the written coordinates added)."""
        self._check(H)
        plans: dict[Any, Any] = self.cached_plan(H, dict)
        if not self._small_write(H, plans):
            return None
        return self._written_delta(H, *self._written(H, plans), plans)

    def _written(self, H: Tensor, plans: dict[Any, Any]) -> tuple[Tensor, Tensor]:
        """The distinct written coordinates ``udst (U,)`` and what is added there, ``(U, B, T')`` (T' = 1:
        the same on every token); each head sublayer type computes it."""
        raise NotImplementedError

    #: a sublayer writing at most this many (coordinate, token) entries is run as additions at flat positions
    #: (`delta`; in the state itself under ``CompiledModel.run``); above it, as a copy of the state with one
    #: add per block of consecutive written slots, which needs no index of every written entry
    DELTA_ELEMS: ClassVar[int] = 1 << 14

    def _small_write(self, H: Tensor, plans: dict[Any, Any]) -> bool:
        """Whether the written (coordinate, token) entries are at most `DELTA_ELEMS`."""
        B, T, _ = H.shape
        return self._destinations(H, plans)[0].numel() * B * T <= self.DELTA_ELEMS

    def _write(
        self, H: Tensor, written: tuple[Tensor, Tensor], out: Tensor | None, plans: dict[Any, Any]
    ) -> Tensor:
        """``H`` (copied, into ``out`` when given) with ``written = (udst, acc)`` added: the flat additions
        of `_written_delta` where they are few, else `_add_written`."""
        udst, acc = written
        if self._small_write(H, plans):
            return self._added(H, out, self._written_delta(H, udst, acc, plans))
        return self._add_written(H, udst, acc, out, plans)

    def _add_written(
        self, H: Tensor, udst: Tensor, acc: Tensor, out: Tensor | None, plans: dict[Any, Any]
    ) -> Tensor:
        """``H`` with ``acc (U, B, T')`` added to the coordinates ``udst`` (T' = 1: to every token); every
        other coordinate is copied (``h + 0 = h``), so only the U written ones are computed."""
        B, T, _ = H.shape
        new = self._copy(H, out)
        src = acc.permute(1, 2, 0)  # (B, T', U), broadcast over the tokens when T' = 1
        runs = self._runs(udst, plans)
        if runs is None:
            return new.index_add_(2, udst, src.expand(B, T, -1))
        # written coordinates in a few blocks of consecutive slots (the layout's named slots): one
        # vectorised add per block instead of one strided column add per coordinate
        for start, stop, at in runs:
            new[..., start:stop] += src[..., at : at + stop - start]
        return new

    MAX_RUNS: ClassVar[int] = 16

    def _runs(self, udst: Tensor, plans: dict[Any, Any]) -> list[tuple[int, int, int]] | None:
        """``udst`` (sorted, distinct) as blocks ``(first slot, end slot, position in udst)`` of consecutive
        slots, or None when there are more than ``MAX_RUNS`` (cached with the plan)."""
        if "runs" not in plans:
            u = udst.tolist()
            starts = [i for i in range(len(u)) if i == 0 or u[i] != u[i - 1] + 1]
            ends = [*starts[1:], len(u)]
            runs = [(u[a], u[b - 1] + 1, a) for a, b in zip(starts, ends, strict=True)]
            plans["runs"] = runs if len(runs) <= self.MAX_RUNS else None
        return plans["runs"]

    def _written_delta(
        self, H: Tensor, udst: Tensor, acc: Tensor, plans: dict[Any, Any] | None = None
    ) -> tuple[Tensor, Tensor]:
        """``acc (U, B, T')`` as [`delta`][icdl.construct.engine.sublayers.Sublayer.delta]'s additions: the
        flat positions of the coordinates ``udst`` on every token (built once per prompt shape) and the
        values added there (T' = 1: the same on every token). Each position gets one addition, ``h + acc``;
        every other coordinate keeps ``h`` (``h + 0 = h``), so only the U written ones are computed."""
        plans = self.cached_plan(H, dict) if plans is None else plans
        if "written" not in plans:
            plans["written"] = slot_index(H.shape, udst)  # (coordinate, batch, token), as acc is laid out
        B, T, _ = H.shape
        values = acc if acc.shape[-1] == T else acc.expand(-1, B, T)
        return plans["written"], values.reshape(-1)

    @property
    def num_heads(self) -> int:
        return int(self.q_idx.shape[0])

    def _heads(self) -> int:
        return self.num_heads

    def _score_dim(self) -> int:
        # Q/K rows are padded at the front with (index 0, coefficient 0) pairs on both sides; any other
        # pair is a read of the head (HeadTable.tensors).
        pad = (self.q_idx == 0) & (self.q_coef == 0) & (self.k_idx == 0) & (self.k_coef == 0)
        leading = torch.cumprod(pad.to(torch.long), dim=1).sum(1)
        return int((self.head_dim - leading).sum())

    def _value_dim(self) -> int:
        return int((self.v_coef != 0).sum())

    def _read_coords(self) -> Tensor:
        return torch.cat(
            [self.q_idx[self.q_coef != 0], self.k_idx[self.k_coef != 0], self.v_src[self.v_coef != 0]]
        )

    def _write_coords(self) -> Tensor:
        return self.v_dst[self.v_coef != 0]

    @property
    def head_dim(self) -> int:
        return int(self.q_idx.shape[1])

    @staticmethod
    def _scores(q: Rows, k: Rows) -> Tensor:
        """Scores ``S[m, b, s, i] = <q_i, k_s>`` (keys before queries) for q of shape (M, d_h, B, Tq) and k of
        shape (M, d_h, B, Tk) -> (M, B, Tk, Tq).

        Accumulated pair by pair in stored order (elementwise, no matmul), so identical heads and identical
        rows give bit-identical scores and the last pair (the bias) is added last.
        """
        M, w, B, Tk = k.shape
        if stacked_fits(k.base, M * w * B * Tk * q.shape[-1]):  # the same additions, in fewer kernels
            return ordered_sum(k.full((M, w, B, Tk, 1)) * q.full((M, w, B, 1, q.shape[-1])), 1)
        return ordered_dot(lambda r: k.col(r)[..., None], lambda r: q.col(r)[:, :, None, :], q.shape[1])

    DENSE: ClassVar[tuple[str, ...]] = ("Q", "K", "V")

    def dense_head(self, head: int) -> tuple[Tensor, Tensor, Tensor]:
        """Dense ``Q_m, K_m (d_h, D)`` and ``V_m (D, D)`` of one head, built from its compact tables."""
        D, dh, dt = self.dim, self.head_dim, self.q_coef.dtype
        rows = torch.arange(dh)
        Q = torch.zeros(dh, D, dtype=dt).index_put_(
            (rows, self.q_idx[head]), self.q_coef[head], accumulate=True
        )
        K = torch.zeros(dh, D, dtype=dt).index_put_(
            (rows, self.k_idx[head]), self.k_coef[head], accumulate=True
        )
        V = torch.zeros(D, D, dtype=dt).index_put_(
            (self.v_dst[head], self.v_src[head]), self.v_coef[head], accumulate=True
        )
        return Q, K, V

    def head_scores(self, H: Tensor, head: int) -> Tensor:
        """Scores ``S[b, i, s] = <Q_m h_i, K_m h_s>`` of head ``m`` on ``H (B, T, D)``, shape
        ``(B, T_query, T_key)``, from the head's dense ``Q_m, K_m`` (independently of the forward pass)."""
        Q, K, _ = self.dense_head(head)
        Hd = H.to(Q.dtype)
        q, k = Hd @ Q.T, Hd @ K.T  # (B, T, d_h)
        return q @ k.transpose(-1, -2)

    def pattern(self, H: Tensor, head: int) -> Tensor:
        """Attention weights of head ``head`` as this sublayer applies them: ``(B, T_query, T_key)`` such that
        the head adds ``pattern @ (H V_m^T)`` to the stream."""
        raise NotImplementedError

    def head_read_coordinates(self, head: int) -> list[int]:
        """The coordinates head ``head`` reads (Q, K and V entries with a non-zero coefficient), sorted."""
        h = head
        reads = torch.cat(
            [
                self.q_idx[h][self.q_coef[h] != 0],
                self.k_idx[h][self.k_coef[h] != 0],
                self.v_src[h][self.v_coef[h] != 0],
            ]
        )
        return sorted(set(reads.tolist()))

    def head_write_coordinates(self, head: int) -> list[int]:
        """The coordinates head ``head``'s value writes (a non-zero coefficient), sorted."""
        return sorted(set(self.v_dst[head][self.v_coef[head] != 0].tolist()))

    def head_results(self, H: Tensor) -> Tensor:
        """What each head adds to the stream ``H (B, T, D)``: ``(B, T, M, D)`` with ``[:, :, m]`` equal to
        ``pattern_m @ (H V_m^T)`` (TransformerLens' ``hook_result`` layout: batch, position, head, d_model).

        Computed head by head from the dense ``V_m`` and ``pattern`` (independently of the compiled
        forward pass); the sum over heads is ``forward(H) - H`` up to rounding: the compiled kernels sum
        the heads of one coordinate in their own order, which keeps the construction's exact
        cancellations, and a dense per-head sum can lose them by ~1e-7 relative.
        """
        heads = []
        for m in range(self.num_heads):
            V = self.dense_head(m)[2].to(H.dtype)
            heads.append(self.pattern(H, m).to(H.dtype) @ (H @ V.T))
        return torch.stack(heads, dim=2)

    def dense_entries(self) -> int:
        return self.num_heads * (2 * self.head_dim * self.dim + self.dim * self.dim)

    def dense(self) -> tuple[Tensor, Tensor, Tensor]:
        """Dense per-head ``Q (M, d_h, D)``, ``K (M, d_h, D)``, ``V (M, D, D)`` (tests, small D only)."""
        M, dh, D = self.num_heads, self.head_dim, self.dim
        dt = self.q_coef.dtype
        Q = torch.zeros(M, dh, D, dtype=dt)
        K = torch.zeros(M, dh, D, dtype=dt)
        V = torch.zeros(M, D, D, dtype=dt)
        m = torch.arange(M)[:, None]
        r = torch.arange(dh)[None, :]
        Q.index_put_((m.expand(M, dh), r.expand(M, dh), self.q_idx), self.q_coef, accumulate=True)
        K.index_put_((m.expand(M, dh), r.expand(M, dh), self.k_idx), self.k_coef, accumulate=True)
        E = self.v_src.shape[1]
        V.index_put_(
            (torch.arange(M)[:, None].expand(M, E), self.v_dst, self.v_src), self.v_coef, accumulate=True
        )
        return Q, K, V

    def dense_parameters(self) -> int:
        """Parameters of the paper's dense form: ``Q_m, K_m, V_m in R^{D x D}`` per head (Definitions 6-7)."""
        return 3 * self.num_heads * self.dim * self.dim
