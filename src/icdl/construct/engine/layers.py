"""Residual sublayers of the paper's transformers with compact, sparse per-head weights.

Every module maps a batch of prompts ``H`` of shape ``(B, T, D)`` — **tokens as rows** (the paper writes
tokens as columns, ``H in R^{D x T}``; we use the transpose so that the embedding is the last, contiguous
axis) — to a tensor of the same shape, and is residual: ``out = H + f(H)``.

* [`ReLUAttention`][icdl.construct.engine.layers.ReLUAttention] — Definition 7 (vector form): ``out_i = h_i +
  (1/T) sum_m sum_s relu(<Q_m h_i, K_m h_s>) V_m h_s`` with T the number of tokens, no mask, no softmax (the
  paper's Definition 7 normalises by n; docs/construction.md explains why T).
* [`EWML`][icdl.construct.engine.layers.EWML] — Definition 6: ``out_i = h_i + sum_m <Q_m h_i, K_m h_i> V_m
  h_i`` (same token, no ReLU, no normalisation).
* [`ReLUMLP`][icdl.construct.engine.layers.ReLUMLP] — Definition 8: ``out = H + W_2 relu(W_1 H)``, no biases
  (the ONE slot provides them).
* [`SoftmaxAttention`][icdl.construct.engine.layers.SoftmaxAttention] — eq. (E.1) with ``W^(O)`` folded into
  V: ``out_i = h_i + sum_m sum_s softmax_s(<Q_m h_i, K_m h_s>) V_m h_s``.

The compact weight format and the floating-point order every sublayer keeps are in
[`icdl.construct.engine.sublayers`][icdl.construct.engine.sublayers]; the same tables evaluated on token
ranges are in [`icdl.construct.engine.row_layers`][icdl.construct.engine.row_layers].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from icdl.construct.engine.kernels import (
    Rows,
    as_tokens,
    features,
    gather,
    ordered_dot,
    ordered_sum,
    scatter,
    stacked_fits,
)
from icdl.construct.engine.sublayers import (
    DEFAULT_CHUNK_ELEMS,
    Accumulate,
    HeadSublayer,
    HeadTable,
    Role,
    Sublayer,
    UnitTable,
)
from icdl.sublayer import SublayerKind

__all__ = [
    "DEFAULT_CHUNK_ELEMS",
    "EWML",
    "Accumulate",
    "HeadSublayer",
    "HeadTable",
    "ReLUAttention",
    "ReLUMLP",
    "Role",
    "SoftmaxAttention",
    "Sublayer",
    "UnitTable",
    "chunk_count",
]


# --------------------------------------------------------------------------------------------------
# The four sublayer types
# --------------------------------------------------------------------------------------------------


class ReLUAttention(HeadSublayer):
    """ReLU attention, Definition 7 in vector form, normalised by the number of tokens T (no mask).

    ``out_i = h_i + (1/T) sum_m sum_s relu(<Q_m h_i, K_m h_s>) V_m h_s`` for ``H`` of shape ``(B, T, D)``.

    Args:
        tables: compact head tables ([`HeadTable`][icdl.construct.engine.sublayers.HeadTable]).
        dim: the embedding dimension D.
        accumulate: ``"tokens"`` sums over keys s for each head, then over heads (fast);
            ``"heads"`` sums the heads writing each coordinate for every (i, s) pair first, then over s —
            needed for exact cancellation of large terms (the relu' delta-step); costs ``B T^2 E`` memory,
            processed in chunks of query tokens.
        max_chunk_elems: bound on the size of intermediate (B, heads, T, T) tensors.
        fast_paths: use the exact shortcuts for token-independent queries or keys/values (see ``forward``);
            set False to run the plain T x T computation (tests compare both).
    """

    KIND: ClassVar[SublayerKind] = "relu_attention"
    _q_slots: Tensor
    _kv_slots: Tensor

    def __init__(
        self,
        tables: dict[str, Tensor],
        dim: int,
        accumulate: Accumulate = "tokens",
        max_chunk_elems: int = DEFAULT_CHUNK_ELEMS,
        fast_paths: bool = True,
        *,
        role: Role | None = None,
        labels: Sequence[str] | None = None,
    ) -> None:
        super().__init__(tables, dim, max_chunk_elems, role=role, labels=labels)
        if accumulate not in ("tokens", "heads"):
            raise ValueError(f"accumulate must be 'tokens' or 'heads', got {accumulate!r}")
        self.accumulate: Accumulate = accumulate
        self.fast_paths = fast_paths
        # Slots that matter for queries and for keys/values (zero-coefficient padding excluded).
        q_slots = self.q_idx[self.q_coef != 0]
        kv_slots = torch.cat([self.k_idx[self.k_coef != 0], self.v_src[self.v_coef != 0]])
        self.register_buffer("_q_slots", torch.unique(q_slots), persistent=False)
        self.register_buffer("_kv_slots", torch.unique(kv_slots), persistent=False)

    def _weights(self, S: Tensor) -> Tensor:
        return torch.relu(S)

    WRITES_INTO: ClassVar[bool] = True

    def _written(self, H: Tensor, plans: dict[Any, Any]) -> tuple[Tensor, Tensor]:
        """The U written coordinates ``udst`` and what is added there, ``(U, B, Tq)`` (Tq = 1: the same on
        every token)."""
        T = H.shape[1]
        q_first = k_first = False
        Hf = H.reshape(-1)
        if self.fast_paths and T > 1:
            # Exact shortcuts (same function, fewer operations): when every token holds the same values in
            # the slots the queries read, every output row is the same — compute one; when every token holds
            # the same values in the slots keys and values read, the T equal terms of the key sum are
            # computed once (T x term / T = term).
            q_first = self._same_tokens(H, "q", self._q_slots, plans, Hf)
            k_first = self._same_tokens(H, "kv", self._kv_slots, plans, Hf)
        Tk = 1 if k_first else T
        if q_first == k_first:
            q, k, v = self._gather_rows(H, ("q", "k", "v"), q_first, plans, Hf)
        else:
            (q,) = self._gather_rows(H, ("q",), q_first, plans, Hf)
            k, v = self._gather_rows(H, ("k", "v"), k_first, plans, Hf)
        udst, entry, sel = self._destinations(H, plans)
        acc = self._normalise(self._attend(q, k, v, (udst, entry, sel), self._prefixes(H, plans)), Tk)
        # Only the U written coordinates change (every other one gets h + 0 = h); a query-broadcast result
        # (Tq = 1) is added to every token.
        return udst, acc

    def _prefixes(self, H: Tensor, plans: dict[Any, Any] | None = None) -> tuple[Tensor, Tensor] | None:
        """Heads whose Q/K reads agree in all but the last pair (the relu' step's ``X`` and ``X + b``):
        ``(first, inv)`` with ``first`` one head per distinct leading part and ``inv`` each head's, or None
        when all differ (cached; follows in-place table edits)."""

        def build() -> tuple[Tensor, Tensor] | None:
            if self.head_dim < 2:
                return None
            lead = [t[:, :-1].to(torch.float64) for t in (self.q_idx, self.q_coef, self.k_idx, self.k_coef)]
            uniq, inv = torch.unique(torch.cat(lead, 1), dim=0, return_inverse=True)
            if 2 * uniq.shape[0] > self.num_heads:
                return None
            first = torch.full((uniq.shape[0],), self.num_heads, dtype=torch.long)
            first.scatter_reduce_(0, inv, torch.arange(self.num_heads), reduce="amin")
            return first.to(H.device), inv.to(H.device)

        plans = self.cached_plan(H, dict) if plans is None else plans
        if "prefix" not in plans:
            plans["prefix"] = build()
        return plans["prefix"]

    def _all_scores(self, q: Rows, k: Rows, prefixes: tuple[Tensor, Tensor] | None) -> Tensor:
        """`_scores` of every head; heads sharing their leading pairs share that partial sum (the
        same additions in the same order, so the same bits), then each adds its last pair."""
        if prefixes is None:
            return self._scores(q, k)
        first, inv = prefixes
        lead = self._scores(q[first, :-1], k[first, :-1]).index_select(0, inv)
        last = q.shape[1] - 1
        return lead + k.col(last)[..., None] * q.col(last)[:, :, None, :]

    def _attend(
        self,
        q: Rows,
        k: Rows,
        v: Rows,
        dests: tuple[Tensor, Tensor, Tensor | None],
        prefixes: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """Sum over keys and heads: q (M, d_h, B, Tq), k (M, d_h, B, Tk), v (M, E, B, Tk) -> (U, B, Tq) for
        the U distinct written coordinates ``dests`` (`_destinations`)."""
        udst, entry, sel = dests
        U = udst.numel()
        M, E, B, Tk = v.shape
        Tq = q.shape[-1]
        if self.accumulate == "tokens":
            # Per head, sum over keys s (dim 3 of (M, E, B, Tk, Tq) is an outer reduction: the same order for
            # every query, so queries with equal scores get bit-identical sums), then scatter the heads.
            # the scores' pair products (m, d_h, B, Tk, Tq) and the weighted values (m, E, B, Tk, Tq)
            per = max(1, self.max_chunk_elems // max(1, max(E, q.shape[1]) * B * Tk * Tq))
            parts = []
            for a in range(0, M, per):
                hs = slice(a, min(a + per, M))
                S = self._all_scores(q, k, prefixes) if per >= M else self._scores(q[hs], k[hs])
                A = self._weights(S)  # (m, B, Tk, Tq)
                vh = v if per >= M else v[hs]
                parts.append((A[:, None] * vh.full((hs.stop - a, E, B, Tk, 1))).sum(3))  # (m, E, B, Tq)
            Z = parts[0] if len(parts) == 1 else torch.cat(parts)
            # entries of one coordinate added in index order, as a scatter into all D coordinates would
            return scatter(U, entry, Z.reshape(M * E, B * Tq)).view(U, B, Tq)
        # Heads first for each (i, s): a 0/1 selection matmul (each destination of the relu' step has exactly
        # two non-zero terms, whose sum is exact in any order), then over the keys s (outer reduction).
        assert sel is not None  # built for accumulate="heads" (_destinations)
        acc = torch.zeros(U, B, Tq, dtype=q.base.dtype, device=q.base.device)
        vfull = v.full()
        per = max(1, self.max_chunk_elems // max(1, B * Tk * (M * max(E, q.shape[1]) + U)))
        for a in range(0, Tq, per):
            I = slice(a, min(a + per, Tq))
            A = self._weights(self._all_scores(q.tokens(I), k, prefixes))  # (M, B, Tk, |I|)
            G = (A[:, None] * vfull[..., None]).reshape(M * E, -1)  # (M*E, B*Tk*|I|)
            C = torch.matmul(sel, G).view(U, B, Tk, -1)
            acc[:, :, I] += C.sum(2)
        return acc

    def _normalise(self, acc: Tensor, T: int) -> Tensor:
        return acc / T

    def pattern(self, H: Tensor, head: int) -> Tensor:
        """``relu(<Q_m h_i, K_m h_s>) / T`` (Definition 7 normalised by the number of tokens T)."""
        S = self.head_scores(H, head)
        return torch.relu(S) / S.shape[-1]


class SoftmaxAttention(ReLUAttention):
    """Softmax attention (paper eq. (E.1), ``W^(O)`` folded into V), no mask, no 1/T factor:
    ``out_i = h_i + sum_m sum_s softmax_s(<Q_m h_i, K_m h_s>) V_m h_s``."""

    KIND: ClassVar[SublayerKind] = "softmax_attention"

    def _weights(self, S: Tensor) -> Tensor:
        return torch.softmax(S, dim=-2)  # scores are (..., keys, queries)

    def _normalise(self, acc: Tensor, T: int) -> Tensor:
        return acc

    def pattern(self, H: Tensor, head: int) -> Tensor:
        """``softmax_s <Q_m h_i, K_m h_s>`` over the keys s (eq. (E.1), no 1/T)."""
        return torch.softmax(self.head_scores(H, head), dim=-1)


class EWML(HeadSublayer):
    """Element-wise multiplication layer, Definition 6 (eq. 3.18): each token only with itself.

    ``out_i = h_i + sum_m <Q_m h_i, K_m h_i> V_m h_i`` — no ReLU on the score, no normalisation.
    """

    KIND: ClassVar[SublayerKind] = "ewml"

    WRITES_INTO: ClassVar[bool] = True

    def _written(self, H: Tensor, plans: dict[Any, Any]) -> tuple[Tensor, Tensor]:
        """The written coordinates ``udst`` and what is added there, ``(U, B, T)``."""
        B, T, _ = H.shape
        # Queries read from each prompt's first token when every token holds the same values there (the
        # paper's backward layers read V_{j+1} from the token's own copy of w): the same products.
        Hf = H.reshape(-1)
        q_first = T > 1 and self._same_tokens(H, "q", self._query_slots(H, plans), plans, Hf)
        (q,) = self._gather_rows(H, ("q",), q_first, plans, Hf)
        k, v = self._gather_rows(H, ("k", "v"), False, plans, Hf)
        # pair by pair in stored order, as the attention scores
        M, w, _, Tk = k.shape
        if stacked_fits(k.base, M * w * B * Tk):  # the same additions, in fewer kernels
            score = ordered_sum(q.full() * k.full(), 1)
        else:
            score = ordered_dot(q.col, k.col, q.shape[1])  # (M, B, T)
        contrib = (score.view(-1, 1, B * T) * v.full().view(score.shape[0], -1, B * T)).reshape(-1, B * T)
        # value entries of one coordinate added in index order into zeros (as a scatter into all D
        # coordinates would), then added to h; the other coordinates are copied
        udst, entry, _ = self._destinations(H, plans)
        acc = scatter(udst.numel(), entry, contrib).view(-1, B, T)
        return udst, acc

    def pattern(self, H: Tensor, head: int) -> Tensor:
        """The diagonal matrix of scores ``<Q_m h_i, K_m h_i>`` (Definition 6: each token with itself)."""
        return torch.diag_embed(torch.diagonal(self.head_scores(H, head), dim1=-2, dim2=-1))


@dataclass(frozen=True)
class _MLPPlan:
    """Flat indices into ``H.reshape(-1)`` for every (unit, token) pair an MLP evaluates, built once per
    prompt shape: ``read_idx``/``read_coef`` of shape ``(r, pairs)`` (read c of every pair), ``write_idx``/
    ``write_coef`` of shape ``(pairs, o)``. Pairs are ordered group by group, then (batch, token, unit), so
    for every (token, coordinate) the writes are scattered in (group, unit, write) order."""

    read_idx: Tensor
    read_coef: Tensor
    write_idx: Tensor
    write_coef: Tensor
    write_pos: Tensor
    write_inv: Tensor
    read_flat: Tensor  # read_idx flattened (one view fewer per call)

    @staticmethod
    def build(
        w1_idx: Tensor,
        w1_coef: Tensor,
        w2_dst: Tensor,
        w2_coef: Tensor,
        groups: Sequence[tuple[slice, slice]],
        H: Tensor,
        max_elems: int,
    ) -> _MLPPlan | None:
        B, T, D = H.shape
        r, o = w1_idx.shape[1], w2_dst.shape[1]
        sizes = [len(range(w1_idx.shape[0])[us]) * len(range(T)[ts]) for us, ts in groups]
        if B * sum(sizes) * (r + o) > max_elems:
            return None
        dev, dt = H.device, H.dtype
        base = torch.arange(B, device=dev) * (T * D)
        ri, rc, wi, wc = [], [], [], []
        for us, ts in groups:
            tok = torch.arange(T, device=dev)[ts]
            start = (base[:, None] + tok[None, :] * D)[:, :, None]  # (B, Tg, 1)
            idx1, c1 = w1_idx[us].to(dev), w1_coef[us].to(device=dev, dtype=dt)
            U = idx1.shape[0]
            ri.append((start[None] + idx1.t()[:, None, None, :]).reshape(r, -1))  # (r, B*Tg*U)
            rc.append(c1.t()[:, None, None, :].expand(r, B, tok.numel(), U).reshape(r, -1))
            idx2, c2 = w2_dst[us].to(dev), w2_coef[us].to(device=dev, dtype=dt)
            wi.append((start[..., None] + idx2[None, None]).reshape(-1, o))  # (B*Tg*U, o)
            wc.append(c2[None, None].expand(B, tok.numel(), U, o).reshape(-1, o))
        write_idx = torch.cat(wi).reshape(-1)
        # the distinct written positions, and each write's index among them (order kept)
        pos, inv = torch.unique(write_idx, return_inverse=True)
        read_idx = torch.cat(ri, 1).contiguous()
        return _MLPPlan(
            read_idx,
            torch.cat(rc, 1).contiguous(),
            write_idx,
            torch.cat(wc).contiguous(),
            pos,
            inv,
            read_idx.view(-1),
        )

    def values(self, H: Tensor) -> Tensor:
        """``W_2 relu(W_1 h)`` entries, flat, aligned with ``write_idx``: reads multiplied by their
        coefficients and added in stored order, as in the chunked path."""
        r = self.read_idx.shape[0]
        g = H.reshape(-1).index_select(0, self.read_flat).view(r, -1).mul_(self.read_coef)
        pre = ordered_sum(g, 0) if r > 1 else g[0]  # g[0] + g[1] + ..., left to right
        return (torch.relu(pre).view(-1, 1) * self.write_coef).view(-1)


class ReLUMLP(Sublayer):
    """Bias-free token-wise ReLU MLP with compact tables, Definition 8: ``out = H + W_2 relu(W_1 H)``.

    Pre-activations are accumulated read by read in the stored order (see the module docstring).
    """

    KIND: ClassVar[SublayerKind] = "mlp"
    w1_idx: Tensor
    w1_coef: Tensor
    w2_dst: Tensor
    w2_coef: Tensor

    TABLES = ("w1_idx", "w1_coef", "w2_dst", "w2_coef")
    INDEX_TABLES = frozenset({"w1_idx", "w2_dst"})

    def __init__(
        self,
        tables: dict[str, Tensor],
        dim: int,
        *,
        role: Role | None = None,
        labels: Sequence[str] | None = None,
        max_chunk_elems: int = DEFAULT_CHUNK_ELEMS,
    ) -> None:
        super().__init__(tables, dim, role=role, labels=labels)
        self.max_chunk_elems = int(max_chunk_elems)
        if self.w1_idx.shape[0] != self.w2_dst.shape[0]:
            raise ValueError("ReLUMLP: reads and writes describe different numbers of hidden units")

    @property
    def hidden(self) -> int:
        return int(self.w1_idx.shape[0])

    def _hidden(self) -> int:
        return self.hidden

    def _read_coords(self) -> Tensor:
        return self.w1_idx[self.w1_coef != 0]

    def _write_coords(self) -> Tensor:
        return self.w2_dst[self.w2_coef != 0]

    def _unit_groups(self) -> list[tuple[slice, slice]]:
        """``(units, tokens)`` pairs on which the units are evaluated (here: every unit on every token)."""
        return [(slice(0, self.hidden), slice(0, None))]

    def _plan(self, H: Tensor) -> _MLPPlan | None:
        """The flat gather/scatter plan for prompts shaped like ``H``, or None when it would exceed
        ``max_chunk_elems`` (the chunked path then bounds the memory)."""
        return self.cached_plan(
            H,
            lambda: _MLPPlan.build(
                self.w1_idx,
                self.w1_coef,
                self.w2_dst,
                self.w2_coef,
                self._unit_groups(),
                H,
                self.max_chunk_elems,
            ),
        )

    WRITES_INTO: ClassVar[bool] = True

    def delta(self, H: Tensor) -> tuple[Tensor, Tensor] | None:
        """All units on all tokens in one gather and one scatter: the writes added into zeros in (unit,
        write) order for every written position, as the chunked path does, then ``h + acc`` there (every
        other position keeps h: h + 0 = h). None: the unit-chunked path bounds the memory."""
        self._check(H)
        plan = self._plan(H)
        if plan is None:
            return None
        acc = torch.zeros(plan.write_pos.numel(), dtype=H.dtype, device=H.device)
        acc.index_add_(0, plan.write_inv, plan.values(H))
        return plan.write_pos, acc

    def forward(self, H: Tensor, out: Tensor | None = None) -> Tensor:
        d = self.delta(H)
        return self._chunked(H, out) if d is None else self._added(H, out, d)

    def _chunked(self, H: Tensor, buffer: Tensor | None = None) -> Tensor:
        B, T, _ = H.shape
        F = features(H)
        U, r = self.w1_idx.shape
        # Units in chunks (no (U, r, B*T) gather larger than max_chunk_elems); the chunks add into one output
        # in unit order, as a single scatter would.
        per = max(1, self.max_chunk_elems // max(1, r * B * T))
        acc = torch.zeros(self.dim, B * T, dtype=H.dtype, device=H.device)
        for a in range(0, U, per):
            u = slice(a, min(a + per, U))
            g = gather(F, self.w1_idx[u], self.w1_coef[u])  # (units, r, B*T)
            pre = g[:, 0]
            for c in range(1, r):
                pre = pre + g[:, c]
            hid = torch.relu(pre)
            out = (hid[:, None] * self.w2_coef[u].to(H.dtype)[..., None]).reshape(-1, B * T)
            acc.index_add_(0, self.w2_dst[u].reshape(-1), out)
        if buffer is None:
            return H + as_tokens(acc, B, T)
        return torch.add(H, as_tokens(acc, B, T), out=buffer)

    DENSE: ClassVar[tuple[str, ...]] = ("W1", "W2")

    def dense_entries(self) -> int:
        return 2 * self.hidden * self.dim

    def dense(self) -> tuple[Tensor, Tensor]:
        """Dense ``W_1 (U, D)`` and ``W_2 (D, U)`` (tests, small D only)."""
        U, D = self.hidden, self.dim
        W1 = torch.zeros(U, D, dtype=self.w1_coef.dtype)
        W2 = torch.zeros(D, U, dtype=self.w2_coef.dtype)
        r, o = self.w1_idx.shape[1], self.w2_dst.shape[1]
        W1.index_put_((torch.arange(U)[:, None].expand(U, r), self.w1_idx), self.w1_coef, accumulate=True)
        W2.index_put_((self.w2_dst, torch.arange(U)[:, None].expand(U, o)), self.w2_coef, accumulate=True)
        return W1, W2

    def dense_parameters(self) -> int:
        """Parameters of the dense form ``W_1 in R^{U x D}``, ``W_2 in R^{D x U}`` (Definition 8)."""
        return 2 * self.hidden * self.dim


def chunk_count(num_heads: int, B: int, T: int, max_chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> int:
    """Number of head chunks a score tensor of ``num_heads`` heads is split into (for docs/benchmarks)."""
    per = max(1, max_chunk_elems // max(1, B * T * T))
    return math.ceil(num_heads / per)
