"""The tensor kernels of the compact sublayers
([`icdl.construct.engine.sublayers`][icdl.construct.engine.sublayers],
[`icdl.construct.engine.layers`][icdl.construct.engine.layers]): gathers of the slots a table reads, sums
added in a fixed order, scatters into the written slots, and the state buffers of
[`CompiledModel.run`][icdl.construct.compile.CompiledModel.run]. Every one computes the same additions in the
same order as the plain loops it replaces (the sublayers' outputs are compared bit for bit in
tests/construct/engine/test_layers_bits.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules import module as _module


def features(H: Tensor) -> Tensor:
    """``(B, T, D) -> (D, B*T)``: the feature-major layout in which gathers and scatters of slots are
    contiguous row copies (``index_select``/``index_add_`` along dim 0)."""
    B, T, D = H.shape
    return H.reshape(B * T, D).t().contiguous()


def as_tokens(F: Tensor, B: int, T: int) -> Tensor:
    """Inverse of `features`: ``(D, B*T) -> (B, T, D)``."""
    return F.t().reshape(B, T, -1)


def gather(F: Tensor, idx: Tensor, coef: Tensor) -> Tensor:
    """``coef[m, r] * h[idx[m, r]]`` for every token: ``(D, N) -> (M, w, N)``."""
    return F.index_select(0, idx.reshape(-1)).view(*idx.shape, F.shape[1]) * coef.to(F.dtype)[..., None]


#: the most entries a cached `slot_index` may have (2 MiB of int64): larger gathers use a column gather, which
#: needs no index of every entry (the plans are cached for every sublayer)
FLAT_INDEX_ELEMS = 1 << 18


def flat_index_fits(shape: Sequence[int], slots: int, first_token: bool = False) -> bool:
    """Whether a `slot_index` of ``slots`` slots of prompts shaped ``shape`` is small enough to cache."""
    B, T, _ = (int(v) for v in shape)
    return slots * B * (1 if first_token else T) <= FLAT_INDEX_ELEMS


def slot_index(shape: Sequence[int], idx: Tensor, first_token: bool = False) -> Tensor:
    """Flat positions into ``H.reshape(-1)`` of the slots ``idx`` of every token of an ``H`` shaped
    ``(B, T, D)`` (``first_token``: of each prompt's first token only), slot-major: entry ``(s, b, t)`` is
    ``b T D + t D + idx[s]``. Built once per prompt shape by the sublayers' plans: one flat
    ``index_select`` with it is a contiguous ``(len(idx), B*T')`` block, 2-4x faster at the reference size
    than a column gather and its transpose."""
    B, T, D = (int(v) for v in shape)
    tokens = torch.arange(B, device=idx.device)[:, None] * (T * D)
    tokens = tokens + torch.arange(1 if first_token else T, device=idx.device)[None, :] * D
    return (idx.to(torch.long)[:, None] + tokens.reshape(1, -1)).reshape(-1)


def slot_rows(H: Tensor, idx: Tensor, first_token: bool = False, flat: Tensor | None = None) -> Tensor:
    """``features(H)[idx]`` — the slots ``idx`` of every token (``first_token``: of each prompt's first token
    only), shape ``(len(idx), B*T)`` — gathered from ``H (B, T, D)`` without transposing the whole state;
    ``flat``: the cached `slot_index` of these arguments (built here when None)."""
    if flat is None:  # a column gather (no index of every entry: large prompts)
        X = H[:, :1] if first_token else H
        return X.reshape(-1, H.shape[-1]).index_select(1, idx).t().contiguous()
    return H.reshape(-1).index_select(0, flat).view(idx.numel(), -1)


def same_tokens(H: Tensor, slots: Tensor) -> bool:
    """Whether every token of ``H (B, T, D)`` holds the same values as its prompt's first token in ``slots``
    (NaN never equals itself). Always False for an ``H`` in an autograd graph: a shortcut that reads one
    token's copy would give the other tokens' copies a zero gradient (right only along directions that keep
    the tokens equal). (The head sublayers use their cached flat form, `HeadSublayer._same_tokens`.)"""
    if H.requires_grad and torch.is_grad_enabled():
        return False
    X = H.index_select(2, slots)
    return torch.equal(X, X[:, :1].expand_as(X))


#: the most elements a stacked product ``(n, ...)`` may have (`stacked_fits`; 8 MiB of float64): below it one
#: gather, one product and one cumsum replace ``n`` gathers and ``2n`` small kernels (the reference size's
#: sublayers are dominated by per-call overhead), above it the pair loop keeps memory at one product
STACKED_ELEMS = 1 << 20


def stacked_fits(x: Tensor, elems: int) -> bool:
    """Whether a product of ``elems`` elements like ``x`` can be summed stacked (`ordered_sum` of the whole
    product tensor) with the bits of `ordered_dot`: float64 on the CPU (where `ordered_sum` is a cumsum that
    adds in order in float64) and at most `STACKED_ELEMS` elements."""
    return x.dtype == torch.float64 and x.device.type == "cpu" and elems <= STACKED_ELEMS


def ordered_dot(a: Callable[[int], Tensor], b: Callable[[int], Tensor], n: int) -> Tensor:
    """``a(0) * b(0) + a(1) * b(1) + ... + a(n-1) * b(n-1)`` (broadcast), added left to right — what
    ``ordered_sum`` of the stacked products computes, bit for bit, without the ``(n, ...)`` product tensor:
    each product is rounded, then added to the running sum (no fused multiply-add)."""
    out = a(0) * b(0)
    if out.requires_grad:  # autograd (e.g. icdl align's sensitivities): the same sums, out of place
        for r in range(1, n):
            out = out + a(r) * b(r)
        return out
    tmp = torch.empty_like(out) if n > 1 else out
    for r in range(1, n):
        out.add_(torch.mul(a(r), b(r), out=tmp))
    return out


@dataclass(frozen=True)
class Rows:
    """Gathered head reads ``coef[m, r] * h[idx[m, r]]`` of shape ``(M, w, B, T')``, held as the distinct
    ``(slot, coef)`` products ``base (n, B, T')`` and each entry's row ``inv (M, w)`` among them: heads that
    read the same slots with the same coefficients (the unit-sum heads of Lemmas 2-3 share their queries)
    are gathered once, and a ``(M, B, T')`` column is copied out only when a product needs it.

    ``flat`` (optional): ``base`` as a contiguous ``(n, B*T')`` view, and ``inv_flat``: ``inv`` flattened —
    given by the gather that made the rows, they save a view per copy-out (the reference size's sublayers
    are dominated by per-call overhead)."""

    base: Tensor
    inv: Tensor
    flat: Tensor | None = None
    inv_flat: Tensor | None = None

    @functools.cached_property
    def shape(self) -> tuple[int, int, int, int]:
        M, w = self.inv.shape
        _, B, T = self.base.shape
        return M, w, B, T

    def __getitem__(self, key: Any) -> Rows:
        """Heads and pairs, ``rows[heads, pairs]`` (indexes ``inv``)."""
        return Rows(self.base, self.inv[key], self.flat)

    def tokens(self, sel: slice) -> Rows:
        """The query tokens ``sel`` (last axis)."""
        return Rows(self.base[..., sel], self.inv)

    def _take(self, idx: Tensor) -> Tensor:
        # rows of the distinct products: a 2-D gather where the base is contiguous (faster than the same
        # index_select on the 3-D base); the caller views the result
        if self.flat is not None:
            return self.flat.index_select(0, idx)
        if self.base.is_contiguous():
            return self.base.view(self.base.shape[0], -1).index_select(0, idx)
        return self.base.index_select(0, idx)

    def col(self, r: int) -> Tensor:
        """Pair ``r`` of every head, ``(M, B, T')``."""
        _, _, B, T = self.shape
        return self._take(self.inv[:, r]).view(-1, B, T)

    def full(self, shape: Sequence[int] | None = None) -> Tensor:
        """The ``(M, w, B, T')`` tensor, contiguous (``shape``: viewed as that shape instead, e.g. with a
        broadcast axis inserted)."""
        idx = self.inv_flat if self.inv_flat is not None else self.inv.reshape(-1)
        return self._take(idx).reshape(self.shape if shape is None else shape)


def scatter(D: int, dst: Tensor, src: Tensor) -> Tensor:
    """``out[dst[e]] += src[e]`` for ``src`` of shape (E, N) -> (D, N); entries of one destination are added
    in index order, the same order for every token."""
    N = src.shape[1]
    out = torch.zeros(D, N, dtype=src.dtype, device=src.device)
    if N == 1:  # one flat scatter (the same additions in the same order, without a loop over rows)
        out.view(-1).index_add_(0, dst, src.reshape(-1))
    else:
        out.index_add_(0, dst, src)
    return out


def ordered_sum(x: Tensor, dim: int) -> Tensor:
    """``x[0] + x[1] + ... + x[-1]`` along ``dim``, added left to right (``((x0 + x1) + x2) + ...``).

    In float64 on the CPU this is the last entry of ``cumsum``, whose kernel adds sequentially in the
    tensor's own dtype (one call instead of ``2 d_h``; ``tests/construct/engine/test_layers.py`` checks the
    bits against the loop); elsewhere (other dtypes accumulate cumsum in a wider type; other devices may scan
    in parallel) the loop itself.
    """
    if x.dtype == torch.float64 and x.device.type == "cpu":
        return x.cumsum(dim).select(dim, -1)
    out = x.select(dim, 0)
    for r in range(1, x.shape[dim]):
        out = out + x.select(dim, r)
    return out


def _state_buffer(buffers: list[Tensor], H: Tensor) -> Tensor:
    """The buffer the next sublayer writes: of (at most) two contiguous buffers shaped like ``H``, the one
    written least recently that is not ``H`` itself (the state a sublayer reads is never the one it writes,
    and the state handed to the last callback survives one more sublayer). ``buffers`` is kept in
    write order, oldest first."""
    fits = [b for b in buffers if b.shape == H.shape and b.dtype == H.dtype and b.device == H.device]
    free = [b for b in fits if b is not H]
    buf = free[0] if free and len(fits) == 2 else torch.empty(H.shape, dtype=H.dtype, device=H.device)
    buffers[:] = [*[b for b in fits if b is not buf][-1:], buf]
    return buf


@dataclass(frozen=True)
class Written:
    """Where a sublayer run in place added into the state: the flat positions ``idx`` of
    ``H.reshape(-1)`` (in the order of the additions; a position may repeat) and, when asked for, the
    values there before (``before``, aligned with ``idx``). Every other position kept its value."""

    idx: Tensor
    before: Tensor | None


def _plain(m: nn.Module) -> bool:
    """Whether ``m(H)`` is exactly ``m.forward(H)``: no forward replaced on the instance (a test's or a
    user's patch) and no module hooks that could see or change what it computes."""
    return (
        "forward" not in m.__dict__
        and not m._forward_hooks
        and not m._forward_pre_hooks
        and not _module._global_forward_hooks
        and not _module._global_forward_pre_hooks
    )


def run_inplace(
    m: nn.Module, H: Tensor, buffers: list[Tensor], keep_before: bool
) -> tuple[Tensor, Written | None]:
    """``m(H)`` written into the state itself when the sublayer is additions at fixed places
    ([`Sublayer.delta`][icdl.construct.engine.sublayers.Sublayer.delta]), with what it wrote (``keep_before``:
    and the values there before); otherwise [`run_sublayer`][icdl.construct.engine.kernels.run_sublayer] and
    None. A state that is not one of ``buffers`` (the caller's prompt) is first copied into one: it is never
    written."""
    delta: Callable[[Tensor], tuple[Tensor, Tensor] | None] | None = getattr(m, "delta", None)
    d = delta(H) if delta is not None and _plain(m) else None
    if d is None:
        return run_sublayer(m, H, buffers), None
    idx, values = d
    if buffers and buffers[-1] is H:  # the buffer written last already: the order stays
        pass
    elif not any(H is b for b in buffers):
        H = _state_buffer(buffers, H).copy_(H)
    else:  # H is the buffer written last (the other one may be written next)
        buffers[:] = [*[b for b in buffers if b is not H], H]
    flat = H.view(-1)
    before = flat.index_select(0, idx) if keep_before else None
    flat.index_add_(0, idx, values)
    return H, Written(idx, before)


def run_sublayer(m: nn.Module, H: Tensor, buffers: list[Tensor] | None) -> Tensor:
    """``m(H)``; with ``buffers`` (not None) and a sublayer that can (``WRITES_INTO``), written into the
    least recently written of two reused state buffers (`_state_buffer`) instead of a new tensor. A forward
    replaced on the instance (a test's or a user's patch) is called as ``m(H)``."""
    if buffers is None or not getattr(m, "WRITES_INTO", False) or "forward" in m.__dict__:
        return m(H)
    return m(H, out=_state_buffer(buffers, H))


# (step, index in the block, sublayer, what it wrote in place, state after it) -> a replacement or None
LayerTrace = Callable[[int | None, int, nn.Module, Written | None, Tensor], "Tensor | None"]


def run_layers(
    parts: Sequence[tuple[int | None, Sequence[nn.Module]]],
    H: Tensor,
    trace: LayerTrace | None,
    *,
    reuse: bool,
    inplace: bool,
    grad: bool = False,
) -> Tensor:
    """The sublayers of ``parts`` (``(step, layers)`` in order) applied to ``H`` without autograd (with
    ``grad``: with it, and neither ``reuse`` nor ``inplace``), ``trace`` called after each: the loop of
    [`CompiledModel.run`][icdl.construct.compile.CompiledModel.run], whose docstring says what ``reuse`` and
    ``inplace`` do."""
    if grad and (reuse or inplace):
        raise ValueError("gradients need fresh states: reuse and inplace must be False")
    buffers: list[Tensor] | None = [] if reuse or inplace else None
    written: Written | None = None
    with torch.enable_grad() if grad else torch.no_grad():
        for step, layers in parts:
            for i, m in enumerate(layers):
                if inplace and buffers is not None:
                    H, written = run_inplace(m, H, buffers, keep_before=trace is not None)
                else:
                    H = run_sublayer(m, H, buffers)
                if trace is not None:
                    new = trace(step, i, m, written, H)
                    H = H if new is None else new
    return H
