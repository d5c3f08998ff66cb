"""The [`ReluSum`][icdl.relu_sum_type.ReluSum] type: ``g(t) = sum_m c_m relu(a_m . (t[, y]) + b_m)`` with its
evaluation (chunked, float64 on the CPU), its size and conditioning measures and its JSON form (paper
Definition 4; docs/relu_sums.md).

The fitters that build one live in [`icdl.relu_sums`][icdl.relu_sums], which re-exports
[`ReluSum`][icdl.relu_sum_type.ReluSum]: import it from there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["ReluSum"]

_F64 = torch.float64
# Evaluation works in chunks of at most this many (points x terms) products, to bound memory.
EVAL_CHUNK_ELEMS = 1 << 22


def as_f64(x: Tensor | np.ndarray | list[float]) -> Tensor:
    """``x`` as a contiguous float64 CPU tensor (the dtype every sum is fitted and evaluated in)."""
    return (
        torch.as_tensor(np.asarray(x, dtype=np.float64) if not isinstance(x, Tensor) else x)
        .to(dtype=_F64, device="cpu")
        .contiguous()
    )


# --------------------------------------------------------------------------------------------------
# The sum type (one or two arguments)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ReluSum:
    """g(t_1, ..., t_k) ≈ sum_m c_m * relu(a_m · (t_1, ..., t_k) + b_m) on [-radius, radius]^k (paper
    Definition 4, Lemma 7; k = 2 for the loss derivative ``u(t, y)[k]`` of Lemma 4 / (C.13)).

    Attributes:
        a: ``(H,)`` for a one-argument sum (the activations and their derivatives), ``(H, k)`` for k
            arguments; float64 CPU tensor, one row per term (= per attention head or MLP hidden unit).
        b, c: ``(H,)`` float64 CPU tensors.
        target: what it approximates, e.g. ``"sigmoid"``, ``"relu'"`` or ``"logistic'"``.
        radius: R; the fit is guaranteed on ``[-R, R]^k`` only. Fitted one-argument sums are constant
            outside.
        eps: requested sup error (``0.0`` for an exact representation).
        sup_error: MEASURED ``max |g - sum|`` on a dense grid over ``[-R, R]^k`` in float64 (for ``relu'``:
            outside the window ``(0, delta)``).
        exact: True when the sum equals the function in exact arithmetic everywhere (relu, identity,
            constants, squared and Huber loss derivatives) or everywhere outside ``(0, delta)`` (the relu'
            delta-step).
    """

    a: Tensor
    b: Tensor
    c: Tensor
    target: str
    radius: float
    eps: float
    sup_error: float
    exact: bool

    def __post_init__(self) -> None:
        for name in ("a", "b", "c"):
            object.__setattr__(self, name, as_f64(getattr(self, name)))
        H = self.b.shape[0] if self.b.dim() == 1 else -1
        if self.a.dim() == 2 and self.a.shape[1] == 1:
            object.__setattr__(self, "a", self.a[:, 0].contiguous())
        if not (self.a.dim() in (1, 2) and self.a.shape[0] == H and self.b.shape == self.c.shape):
            raise ValueError(
                f"need a (H,) or (H, k), b (H,), c (H,); got {self.a.shape}, {self.b.shape}, {self.c.shape}"
            )

    def __repr__(self) -> str:
        """One line for a REPL or a notebook cell: target, arguments, terms, range and error (not every
        coefficient; those are ``a``, ``b``, ``c`` and ``terms()``)."""
        k = self.num_args
        h = self.num_terms
        box = f"[-{self.radius:g}, {self.radius:g}]" + (f"^{k}" if k > 1 else "")
        err = "exact" if self.exact else f"eps {self.eps:.1e}, measured sup error {self.sup_error:.1e}"
        return f"ReluSum({self.target!r}, {k} arg{'s' * (k > 1)}, {h} term{'s' * (h != 1)} on {box}, {err})"

    @property
    def num_args(self) -> int:
        """k, the number of arguments."""
        return 1 if self.a.dim() == 1 else int(self.a.shape[1])

    def __call__(self, *args: Tensor) -> Tensor:
        """Evaluate the sum elementwise on ``num_args`` tensors that broadcast together.

        Computed in the arguments' floating dtype on their device (integers are promoted to float64);
        differentiable in the arguments.
        """
        if len(args) != self.num_args:
            raise TypeError(f"this ReLU sum takes {self.num_args} argument(s), got {len(args)}")
        ts = [torch.as_tensor(t) for t in args]
        dtype = ts[0].dtype
        for t in ts[1:]:
            dtype = torch.promote_types(dtype, t.dtype)
        if not dtype.is_floating_point:
            dtype = _F64
        ts = list(torch.broadcast_tensors(*(t.to(dtype) for t in ts)))
        shape, device = ts[0].shape, ts[0].device
        if self.num_terms == 0:
            return torch.zeros(shape, dtype=dtype, device=device)
        A = self.a.reshape(self.num_terms, -1).to(dtype=dtype, device=device)
        b, c = (v.to(dtype=dtype, device=device) for v in (self.b, self.c))
        flats = [t.reshape(-1) for t in ts]
        step = max(1, EVAL_CHUNK_ELEMS // self.num_terms)
        A = A.contiguous()
        if any(t.requires_grad for t in flats) or any(v.requires_grad for v in (A, b, c)):
            parts = []
            for chunk in zip(*(f.split(step) for f in flats), strict=True):
                pre = chunk[0][:, None] * A[:, 0]
                for i in range(1, len(chunk)):
                    pre = pre + chunk[i][:, None] * A[:, i]
                parts.append(torch.relu(pre + b) @ c)
            out = torch.cat(parts) if parts else flats[0].new_zeros(0)
            return out.reshape(shape)
        # One reused (chunk, H) buffer: allocating a fresh ~32 MB temporary per chunk fragments the
        # C heap until memory grows with the number of chunks (GBs for a 1e-9 fit).
        n = flats[0].numel()
        out = flats[0].new_empty((n,))
        buf = flats[0].new_empty((min(step, n), self.num_terms))
        for start in range(0, n, step):
            stop = min(start + step, n)
            view = buf[: stop - start]
            torch.mul(flats[0][start:stop, None], A[:, 0], out=view)
            for i in range(1, len(flats)):
                view.addcmul_(flats[i][start:stop, None], A[:, i])
            view.add_(b).relu_()
            torch.mv(view, c, out=out[start:stop])
        return out.reshape(shape)

    @property
    def num_terms(self) -> int:
        """H, the number of terms (= attention heads or MLP hidden units per scalar unit)."""
        return int(self.b.shape[0])

    @property
    def coef_mass(self) -> float:
        """C = sum_m |c_m| (Definition 4)."""
        return float(self.c.abs().sum())

    @property
    def max_abs_a(self) -> float:
        """max_m ||a_m||_1 over the input weights, bias excluded (the paper asks for ||(a_m, b_m)||_1 <= 1;
        the code does not need it)."""
        if not self.num_terms:
            return 0.0
        return float(self.a.reshape(self.num_terms, -1).abs().sum(1).max())

    def terms(self) -> list[list[float]]:
        """The terms as ``[[a, b, c], ...]`` (``[[a_1, ..., a_k, b, c], ...]`` for k arguments)."""
        A = self.a.reshape(self.num_terms, -1)
        return torch.cat([A, self.b[:, None], self.c[:, None]], dim=1).tolist()

    def to_dict(self) -> dict:
        """JSON-ready description: target, range, eps, exact, num_terms, coef_mass, max_abs_a,
        sup_error, terms."""
        return {
            "target": self.target,
            "range": self.radius,
            "eps": self.eps,
            "exact": self.exact,
            "num_terms": self.num_terms,
            "coef_mass": self.coef_mass,
            "max_abs_a": self.max_abs_a,
            "sup_error": self.sup_error,
            "terms": self.terms(),
        }
