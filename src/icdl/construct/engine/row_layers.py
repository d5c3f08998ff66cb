"""Head and MLP tables evaluated on token ranges
([`RowAttention`][icdl.construct.engine.row_layers.RowAttention],
[`RowMLP`][icdl.construct.engine.row_layers.RowMLP]): the sublayers of
[`icdl.construct.engine.layers`][icdl.construct.engine.layers] for prompts made of token types (data tokens
and weight-row tokens, e.g. ``--variant rows``), where a head or hidden unit is non-zero only between known
ranges of tokens.

* [`RowAttention`][icdl.construct.engine.row_layers.RowAttention] — ReLU attention **without** the 1/T factor
  (Definition 7 with 1/T folded into the value weights), heads evaluated for query tokens
  ``[q0, q1)`` against key tokens ``[k0, k1)``, the score of a head split into parts added in order, computed
  with matmuls;
* [`RowMLP`][icdl.construct.engine.row_layers.RowMLP] — the ReLU MLP of Definition 8 evaluated on token
  ranges;
* [`pack_heads`][icdl.construct.engine.row_layers.pack_heads] — padded head tables (and part widths) from
  per-head Q/K parts and values.

The class names are those saved in model files ([`icdl.construct.store`][icdl.construct.store]), so they stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from icdl.construct.engine.layers import ReLUMLP
from icdl.construct.engine.sublayers import Accumulate, HeadSublayer, Role
from icdl.sublayer import SublayerKind

__all__ = ["EXPANDED_COEF_ELEMS", "MERGE_ELEMS", "RowAttention", "RowMLP", "pack_heads"]


class RowAttention(HeadSublayer):
    """ReLU attention without the 1/T factor, between token ranges, computed with matmuls:
    ``out_i = h_i + sum_m sum_s relu(<Q_m h_i, K_m h_s>) V_m h_s`` (Definition 7 with 1/T folded into V).

    * ``groups``: ``(first head, end head, query start, query stop, key start, key stop)`` — heads
      ``[first, end)`` are evaluated for the query tokens ``[query start, query stop)`` against the key
      tokens ``[key start, key stop)`` (stop -1: to the end). The builder picks the ranges from the layout:
      every other token holds 0 in the slots those heads read there (row slots on data tokens, data slots
      on row tokens, another layer's row slots on a row token; the verifier checks after every sublayer
      that nothing is written elsewhere), so its score or value is exactly 0 and skipping it changes
      nothing.
    * ``parts``: a head's Q/K pairs are split into consecutive parts of fixed widths; each part's score is
      one matmul (an exact sum wherever the key side is one-hot), and the parts are added in order, so a
      part of gate terms ``C r' - C`` cancels exactly before the part with the signal is added, and a bias
      part comes last. Heads with identical parts get bit-identical partial scores (computed once), which
      keeps the relu' step ``relu(X) - relu(X - 1)`` exact.
    """

    KIND: ClassVar[SublayerKind] = "relu_attention"
    # How the weighted values are summed: over the keys for each head, then over the heads (what
    # ReLUAttention calls "tokens"; saved with the model as before).
    accumulate: ClassVar[Accumulate] = "tokens"

    def __init__(
        self,
        tables: dict[str, Tensor],
        dim: int,
        parts: Sequence[int] = (),
        groups: Sequence[Sequence[int]] = (),
        *,
        role: Role | None = None,
        labels: Sequence[str] | None = None,
    ) -> None:
        super().__init__(tables, dim, role=role, labels=labels)
        self.parts = tuple(int(p) for p in parts) or (self.head_dim,)
        if sum(self.parts) != self.head_dim:
            raise ValueError(
                f"RowAttention: parts {self.parts} do not add up to the head width {self.head_dim}"
            )
        self.groups = tuple(tuple(int(v) for v in g) for g in groups) or ((0, self.num_heads, 0, -1, 0, -1),)
        if sorted(h for g in self.groups for h in range(g[0], g[1])) != list(range(self.num_heads)):
            raise ValueError("RowAttention: the groups must cover every head exactly once")

        def rng(a: int, b: int) -> slice:
            return slice(a, None if b < 0 else b)

        # Per group: heads, query and key ranges, and per part the distinct heads (the first head with that
        # Q/K row; relative to the group) and, per head, which one it is (None when all heads differ).
        self._groups: list[tuple[slice, slice, slice, list[tuple[slice, Tensor, Tensor | None]]]] = [
            (slice(h0, h1), rng(q0, q1), rng(k0, k1), self._part_heads(h0, h1))
            for h0, h1, q0, q1, k0, k1 in self.groups
        ]

    def _part_heads(self, h0: int, h1: int) -> list[tuple[slice, Tensor, Tensor | None]]:
        """Per part of heads ``[h0, h1)``: its columns, the distinct heads (the first head with that Q/K
        row, relative to h0) and each head's index among them (None when all heads differ)."""
        out = []
        off = 0
        for p in self.parts:
            cols = slice(off, off + p)
            key = torch.cat(
                [
                    t[h0:h1, cols].to(torch.float64)
                    for t in (self.q_idx, self.q_coef, self.k_idx, self.k_coef)
                ],
                dim=1,
            )
            uniq, inv = torch.unique(key, dim=0, return_inverse=True)
            first = torch.full((uniq.shape[0],), h1 - h0, dtype=torch.long)
            first.scatter_reduce_(0, inv, torch.arange(inv.numel()), reduce="amin")
            out.append((cols, first, None if uniq.shape[0] == h1 - h0 else inv))
            off += p
        return out

    def store_kwargs(self) -> dict[str, Any]:
        return {"parts": list(self.parts), "groups": [list(g) for g in self.groups]}

    def pattern(self, H: Tensor, head: int) -> Tensor:
        """``relu(<Q_m h_i, K_m h_s>)`` — no 1/T — on the query and key tokens of the head's group, 0 for
        every other (query, key) pair (the sublayer never evaluates them)."""
        S = self.head_scores(H, head)
        out = torch.zeros_like(S)
        for hs, queries, keys, _ in self._groups:
            if hs.start <= head < hs.stop:
                out[:, queries, keys] = torch.relu(S[:, queries, keys])
        return out

    def _score_dim(self) -> int:
        pad = (self.q_idx == 0) & (self.q_coef == 0) & (self.k_idx == 0) & (self.k_coef == 0)
        return int((~pad).sum())

    def _plan(self, H: Tensor) -> _RowPlan | None:
        """The flat gather plan for prompts shaped like ``H``, or None when it would exceed
        ``max_chunk_elems`` (the per-group path then gathers group by group)."""
        return self.cached_plan(H, lambda: _RowPlan.build(self, H))

    WRITES_INTO: ClassVar[bool] = True

    def forward(self, H: Tensor, out: Tensor | None = None) -> Tensor:
        d = self.delta(H)
        return self._forward_groups(H, out) if d is None else self._added(H, out, d)

    def delta(self, H: Tensor) -> tuple[Tensor, Tensor] | None:
        """The flat path's scatter positions and values (None: the per-group path, for prompts whose gather
        would exceed ``max_chunk_elems``)."""
        self._check(H)
        plan = self._plan(H)
        if plan is None:
            return None
        # One gather (with the coefficients) for the Q, K and V entries of every group and part, laid out so
        # that each operand below is a contiguous view; one scatter of every group's values into H, in
        # (group, head, entry) order for every coordinate, as the per-group path adds them.
        B = H.shape[0]
        G = plan.gather(H)
        zs = []
        as_strided = G.as_strided  # contiguous segments of the gather (offset, shape, strides in the plan)
        for parts, (v0, vshape, vstrides) in plan.groups:
            S: Tensor | None = None
            for (q0, qshape, qstrides), (k0, kshape, kstrides), inv in parts:
                part = torch.bmm(as_strided(qshape, qstrides, q0), as_strided(kshape, kstrides, k0))
                if inv is not None:  # (B * distinct heads, Tq, Tk) -> every head
                    Tq, Tk = qshape[1], kshape[2]
                    part = part.view(B, -1, Tq, Tk).index_select(1, inv).view(-1, Tq, Tk)
                S = part if S is None else S.add_(part)  # parts added in order
            assert S is not None
            zs.append(torch.bmm(S.relu_(), as_strided(vshape, vstrides, v0)).view(-1))
        return plan.scatter_idx, zs[0] if len(zs) == 1 else torch.cat(zs)

    def _forward_groups(self, H: Tensor, buffer: Tensor | None = None) -> Tensor:
        out = self._copy(H, buffer)
        for hs, queries, keys, parts in self._groups:
            Hq, Hk = H[:, queries], H[:, keys]
            B, Tq, _ = Hq.shape
            # (B, heads, T, width): heads as a batch dimension of the matmuls
            q = (Hq[..., self.q_idx[hs]] * self.q_coef[hs]).permute(0, 2, 1, 3)
            k = (Hk[..., self.k_idx[hs]] * self.k_coef[hs]).permute(0, 2, 3, 1)  # (B, heads, width, Tk)
            v = (Hk[..., self.v_src[hs]] * self.v_coef[hs]).permute(0, 2, 1, 3)  # (B, heads, Tk, E)
            S: Tensor | None = None
            for cols, first, inv in parts:
                if inv is None:
                    part = torch.matmul(q[..., cols], k[:, :, cols])
                else:
                    part = torch.matmul(q[:, first, :, cols], k[:, first, cols])[:, inv]
                S = part if S is None else S + part  # (B, heads, Tq, Tk), parts added in order
            assert S is not None
            Z = torch.matmul(torch.relu(S), v)  # (B, heads, Tq, E)
            # entries are added in index order (heads in order), the same for every token
            dst = self.v_dst[hs].reshape(-1)
            out[:, queries].index_add_(2, dst, Z.transpose(1, 2).reshape(B, Tq, -1))
        return out


_Seg = tuple[int, torch.Size, tuple[int, int, int]]  # offset, 3-d shape, its contiguous strides


def _strides(shape: torch.Size) -> tuple[int, int, int]:
    """Strides of a contiguous 3-d tensor of this shape."""
    return (shape[1] * shape[2], shape[2], 1)


MERGE_ELEMS = 1 << 20  # merge groups while their joint score and value tensors stay this small
#: gathers of at most this many entries keep their coefficients expanded in the plan (`_RowPlan.gather`: one
#: multiplication instead of three calls per operand; 512 KiB of float64 at most per sublayer)
EXPANDED_COEF_ELEMS = 1 << 16


def _merged_groups(m: RowAttention, T: int) -> list[tuple[slice, slice, slice, list[Any]]]:
    """``m``'s groups, with consecutive groups that share their key tokens and whose heads and query tokens
    follow on merged into one (heads ``[h0, h2)`` x queries ``[q0, q2)``) while the merged tensors stay under
    [`MERGE_ELEMS`][icdl.construct.engine.row_layers.MERGE_ELEMS] entries (small sizes, where each group's
    fixed cost per call dominates).

    The extra (head, query) pairs are those the layout makes exactly 0 — the invariant that lets the
    builder skip them (see [`RowAttention`][icdl.construct.engine.row_layers.RowAttention]): a zero score,
    relu(0) = 0, a zero value added. The scatter order for every coordinate stays (head, entry).
    """
    width = m.head_dim + int(m.v_src.shape[1])
    merged: list[list[int]] = []
    for h0, h1, q0, q1, k0, k1 in m.groups:
        q1, k1 = (T if q1 < 0 else q1), (T if k1 < 0 else k1)
        if merged:
            g = merged[-1]
            size = (h1 - g[0]) * (q1 - g[2]) * (k1 - k0) * width
            if g[1] == h0 and g[3] == q0 and (g[4], g[5]) == (k0, k1) and size <= MERGE_ELEMS:
                g[1], g[3] = h1, q1
                continue
        merged.append([h0, h1, q0, q1, k0, k1])
    return [
        (slice(h0, h1), slice(q0, q1), slice(k0, k1), m._part_heads(h0, h1))
        for h0, h1, q0, q1, k0, k1 in merged
    ]


@dataclass(frozen=True)
class _RowPlan:
    """Flat indices into ``H.reshape(-1)`` for one
    [`RowAttention`][icdl.construct.engine.row_layers.RowAttention] and one prompt shape.

    ``gather_idx``: every Q operand ``(B, heads, Tq, width)``, K operand ``(B, heads, width, Tk)`` (per part,
    distinct heads only) and V operand ``(B, heads, Tk, E)`` of every group, back to back; ``coefs``: per
    operand its offset, 4-d shape and coefficients, broadcast over the tokens (not expanded: the plan is
    cached for every sublayer, so it is kept at 4 bytes per entry where int32 indices suffice); ``groups``:
    per group, per part the Q and K segments ``(offset, shape)`` and the head expansion (None when every head
    is distinct), and the V segment; ``scatter_idx``: where each value of the ``(B, heads, Tq, E)`` outputs,
    group after group, is added.
    """

    gather_idx: Tensor
    coefs: list[tuple[int, torch.Size, Tensor]]
    groups: list[tuple[list[tuple[_Seg, _Seg, Tensor | None]], _Seg]]
    scatter_idx: Tensor
    flat_coef: Tensor | None = None

    def gather(self, H: Tensor) -> Tensor:
        """Every operand's entries ``coef * h``, flat (each the same product as an expanded coefficient
        table would give): one multiplication by ``flat_coef`` where the plan holds it expanded (small
        plans, whose time is per-call overhead), else one per operand with its broadcast coefficients."""
        G = H.reshape(-1).index_select(0, self.gather_idx)
        if self.flat_coef is not None:
            return G.mul_(self.flat_coef)
        for off, shape, c in self.coefs:
            G[off : off + shape.numel()].view(shape).mul_(c)
        return G

    @staticmethod
    def build(m: RowAttention, H: Tensor) -> _RowPlan | None:
        B, T, D = H.shape
        dev, dt = H.device, H.dtype
        base = (torch.arange(B, device=dev) * (T * D))[:, None, None, None]
        idx: list[Tensor] = []
        coef: list[tuple[int, torch.Size, Tensor]] = []
        scatter: list[Tensor] = []
        groups: list[tuple[list[tuple[_Seg, _Seg, Tensor | None]], _Seg]] = []
        offset = 0

        def add(i: Tensor, c: Tensor) -> _Seg:
            nonlocal offset
            idx.append(i.reshape(-1).to(itype))
            coef.append((offset, i.shape, c.contiguous()))
            shape = torch.Size((i.shape[0] * i.shape[1], i.shape[2], i.shape[3]))  # batch x heads
            seg = (offset, shape, _strides(shape))
            offset += i.numel()
            return seg

        def table(name: str, heads: Tensor, cols: slice) -> Tensor:
            return getattr(m, name)[heads][:, cols].to(dev)

        merged = _merged_groups(m, T)
        size = 0  # entries of the gather, counted before anything is built
        for hs, queries, keys, parts in merged:
            tq_, tk_, heads_ = len(range(T)[queries]), len(range(T)[keys]), hs.stop - hs.start
            E = int(m.v_src.shape[1])
            for cols, first, inv in parts:
                width = cols.stop - cols.start
                size += B * (heads_ if inv is None else int(first.numel())) * width * (tq_ + tk_)
            size += B * heads_ * tk_ * E
        if size > m.max_chunk_elems:
            return None
        itype = torch.int32 if B * T * D < 2**31 else torch.long  # index_select / index_add_ take either
        for hs, queries, keys, parts in merged:
            tq = torch.arange(T, device=dev)[queries][None, None, :, None] * D
            tk = torch.arange(T, device=dev)[keys][None, None, None, :] * D
            every = torch.arange(hs.start, hs.stop)
            segs: list[tuple[_Seg, _Seg, Tensor | None]] = []
            for cols, first, inv in parts:
                heads = every if inv is None else hs.start + first
                qi, qc = table("q_idx", heads, cols), table("q_coef", heads, cols).to(dt)
                ki, kc = table("k_idx", heads, cols), table("k_coef", heads, cols).to(dt)
                q = add(base + tq + qi[None, :, None, :], qc[None, :, None, :])  # (B, heads, Tq, w)
                k = add(base + tk + ki[None, :, :, None], kc[None, :, :, None])  # (B, heads, w, Tk)
                segs.append((q, k, None if inv is None else inv.to(dev)))
            all_cols = slice(0, None)
            vi, vc = table("v_src", every, all_cols), table("v_coef", every, all_cols).to(dt)
            # (B, heads, Tk, E)
            v = add(base + tk.transpose(2, 3) + vi[None, :, None, :], vc[None, :, None, :])
            scatter.append((base + tq + table("v_dst", every, all_cols)[None, :, None, :]).reshape(-1))
            groups.append((segs, v))
        assert offset == size
        flat = None
        if size <= EXPANDED_COEF_ELEMS:
            flat = torch.cat([c.expand(shape).reshape(-1) for _, shape, c in coef])
        return _RowPlan(torch.cat(idx), coef, groups, torch.cat(scatter).to(itype), flat)


class RowMLP(ReLUMLP):
    """The token-wise ReLU MLP of Definition 8 (``out = H + W_2 relu(W_1 H)``, reads accumulated in stored
    order, as [`ReLUMLP`][icdl.construct.engine.layers.ReLUMLP]) evaluated only where its units can be
    non-zero: ``groups`` are ``(first unit, end unit, token start, token stop)`` (stop -1: to the end). On
    other tokens every read of those units is 0 (layout invariant, checked by the verifier), ``relu(0) =
    0``."""

    def __init__(
        self,
        tables: dict[str, Tensor],
        dim: int,
        groups: Sequence[Sequence[int]] = (),
        *,
        role: Role | None = None,
        labels: Sequence[str] | None = None,
    ) -> None:
        super().__init__(tables, dim, role=role, labels=labels)
        self.groups = tuple(tuple(int(v) for v in g) for g in groups) or ((0, self.hidden, 0, -1),)
        if sorted(u for g in self.groups for u in range(g[0], g[1])) != list(range(self.hidden)):
            raise ValueError("RowMLP: the groups must cover every unit exactly once")
        self._groups = [(slice(u0, u1), slice(t0, None if t1 < 0 else t1)) for u0, u1, t0, t1 in self.groups]

    def store_kwargs(self) -> dict[str, Any]:
        return {"groups": [list(g) for g in self.groups]}

    def _unit_groups(self) -> list[tuple[slice, slice]]:
        return self._groups

    def delta(self, H: Tensor) -> tuple[Tensor, Tensor] | None:
        """Every group in one gather, its writes added into H in (group, unit, write) order (None: the
        token-chunked path, for prompts whose gather would exceed ``max_chunk_elems``)."""
        self._check(H)
        plan = self._plan(H)
        return None if plan is None else (plan.write_idx, plan.values(H))

    def forward(self, H: Tensor, out: Tensor | None = None) -> Tensor:
        d = self.delta(H)
        out = self._copy(H, out)
        if d is not None:
            out.view(-1).index_add_(0, *d)
            return out
        B, T, _ = H.shape
        for us, tokens in self._groups:
            idx, coef, w2 = self.w1_idx[us], self.w1_coef[us], self.w2_coef[us]
            dst = self.w2_dst[us].reshape(-1)
            # Tokens in chunks, so that the temporaries below (the gathered reads and their products, the
            # hidden units, their weighted writes) hold at most max_chunk_elems together: the projection's
            # scratch units on 10^3 data tokens were ~1 GB at once. Every token's coordinates get the same
            # additions in the same order, chunked or not.
            t0, t1, _ = tokens.indices(T)
            per_token = B * (2 * idx.numel() + idx.shape[0] + w2.numel())
            per = max(1, self.max_chunk_elems // max(1, per_token))
            for a in range(t0, t1, per):
                rows = slice(a, min(a + per, t1))
                g = H[:, rows][..., idx] * coef  # (B, tokens, U, r)
                pre = g[..., 0]
                for c in range(1, g.shape[-1]):
                    pre = pre + g[..., c]
                hid = torch.relu(pre)[..., None] * w2  # (B, tokens, U, o)
                out[:, rows].index_add_(2, dst, hid.flatten(2))
        return out


def pack_heads(
    heads: list[tuple[list[tuple[Tensor, Tensor, Tensor, Tensor]], tuple[Tensor, Tensor, Tensor]]],
    dtype: torch.dtype,
) -> tuple[dict[str, Tensor], tuple[int, ...]]:
    """Padded head tables from per-head parts ``(q_idx, q_coef, k_idx, k_coef)`` and values
    ``(src, dst, coef)``; each part is front-padded to the widest head's part (pads read index 0 with
    coefficient 0: an exact 0); parts that are empty in every head are dropped."""
    nparts = len(heads[0][0])
    keep = [g for g in range(nparts) if max(int(h[0][g][0].numel()) for h in heads) > 0]
    heads = [([h[0][g] for g in keep], h[1]) for h in heads]
    widths = tuple(max(int(h[0][g][0].numel()) for h in heads) for g in range(len(keep)))
    ne = max(int(h[1][0].numel()) for h in heads)

    def front(t: Tensor, w: int, dt: torch.dtype) -> Tensor:
        return torch.cat([torch.zeros(w - t.numel(), dtype=dt), t.to(dt)])

    def back(t: Tensor, w: int, dt: torch.dtype) -> Tensor:
        return torch.cat([t.to(dt), torch.zeros(w - t.numel(), dtype=dt)])

    out: dict[str, list[Tensor]] = {
        n: [] for n in ("q_idx", "q_coef", "k_idx", "k_coef", "v_src", "v_dst", "v_coef")
    }
    for qk, (src, dst, coef) in heads:
        for name, pos, dt in (
            ("q_idx", 0, torch.long),
            ("q_coef", 1, dtype),
            ("k_idx", 2, torch.long),
            ("k_coef", 3, dtype),
        ):
            out[name].append(torch.cat([front(part[pos], w, dt) for part, w in zip(qk, widths, strict=True)]))
        out["v_src"].append(back(src, ne, torch.long))
        out["v_dst"].append(back(dst, ne, torch.long))
        out["v_coef"].append(back(coef, ne, dtype))
    return {n: torch.stack(ts) for n, ts in out.items()}, widths
