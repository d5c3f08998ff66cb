"""Honest baselines with the ICL model's call signature, vectorised over prompts.

Every baseline is a small object with a ``name`` and ``__call__(xs, ys) -> preds``:

* ``xs``: ``(B, n, d_x)``, ``ys``: ``(B, n, d_y)`` — B prompts of n points each;
* ``preds``: ``(B, n, d_y)`` where ``preds[:, k]`` may use only ``x_0, y_0, ..., x_{k-1}, y_{k-1}, x_k``,
  i.e. the prediction for the query ``x_k`` after ``k`` in-context examples (the layout of Garg et al.
  2022 and of the paper, docs/protocol.md, task; docs/protocol.md, baselines).

Every baseline computes in the dtype and on the device of ``xs``, is seeded where random (results do not
depend on the device's RNG or on chunk sizes), and treats all prompts at once; only the per-prefix
network trainers (``MLPBaseline``, ``GDBaseline``) loop over the prefix length k.

Baselines (defaults in brackets; docs/baselines.md has the rationale and timings):

* ``ZeroBaseline`` — predicts 0.
* ``AveragingBaseline`` — the mean of the context labels ``y_0..y_{k-1}`` (0 at k = 0). On the paper's
  ``N(-2, I)`` inputs this already scores R² ≈ 0.85 (docs/protocol.md, task). Not Garg's ``AveragingModel``.
* ``LeastSquaresBaseline`` — min-norm least squares on the first k examples (pinv), or ridge with
  ``ridge > 0`` [intercept column on]; 0 at k = 0.
* ``KNNBaseline`` — mean label of the [3] nearest context inputs (Euclidean), fewer when k < 3; 0 at k = 0.
* ``MLPBaseline`` — the paper's baseline: an N-layer MLP of width [200] (ReLU, biases, He init) per prompt
  and per k, trained on the k context examples by full-batch Adam [lr 5e-3, 100 epochs], evaluated on the
  query after every epoch; ``selection="last"`` (honest) or ``"best"`` (the paper's oracle epoch).
* ``GDBaseline`` — L steps of plain (projected) gradient descent on the target's bias-free N-layer network
  (``icdl.nets``) from one seeded random ``w0``: the algorithm the paper's construction emulates, with the
  step size tuned on held-out prompts by
  [`GDBaseline.tune_step_size`][icdl.icl.baselines.simple.GDBaseline.tune_step_size].
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import Tensor

from icdl import nets
from icdl.errors import InputError
from icdl.icl import metrics

__all__ = [
    "DEFAULT_LR_GRID",
    "AveragingBaseline",
    "Baseline",
    "GDBaseline",
    "KNNBaseline",
    "LeastSquaresBaseline",
    "MLPBaseline",
    "MLPTrace",
    "ZeroBaseline",
    "check_prompts",
]

# Elements per chunk for the (prompts x prefixes x ...) intermediates (~256 MiB in float64).
_CHUNK_ELEMENTS = 2**25

DEFAULT_LR_GRID: tuple[float, ...] = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)


class Baseline(Protocol):
    """A predictor with the ICL model's signature."""

    @property
    def name(self) -> str: ...

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor: ...


def check_prompts(xs: Tensor, ys: Tensor) -> None:
    """Raise [`InputError`][icdl.errors.InputError] unless ``xs (B, n, d_x)`` and ``ys (B, n, d_y)`` form a
    prompt batch."""
    for name, t in (("xs", xs), ("ys", ys)):
        if not isinstance(t, Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise InputError(f"{name} must have shape (B, n, d), got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise InputError(f"{name} must be floating point, got {t.dtype}")
    if xs.shape[:2] != ys.shape[:2]:
        raise InputError(f"xs {tuple(xs.shape)} and ys {tuple(ys.shape)} disagree on (B, n)")
    if xs.dtype != ys.dtype or xs.device != ys.device:
        raise InputError(
            f"xs and ys must share dtype and device, got {xs.dtype}/{xs.device} and {ys.dtype}/{ys.device}"
        )
    if xs.shape[0] < 1 or xs.shape[1] < 1:
        raise InputError(f"need at least one prompt and one point, got {tuple(xs.shape)}")


def _chunks(total: int, per_item: int) -> list[slice]:
    """Split ``range(total)`` so each chunk holds at most ``_CHUNK_ELEMENTS`` intermediate elements."""
    size = max(1, _CHUNK_ELEMENTS // max(per_item, 1))
    return [slice(s, min(s + size, total)) for s in range(0, total, size)]


def derived_seed(*parts: int) -> int:
    """An independent 63-bit seed for each (seed, k, ...) tuple (no collisions between nearby seeds)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint64)[0] >> 1)


def _strict_lower(n: int, device: torch.device) -> Tensor:
    """``M[k, i] = 1`` iff ``i < k``: row k selects the k context examples of prefix k."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(-1)


# --------------------------------------------------------------------------------------------------
# Closed-form baselines
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZeroBaseline:
    """Predicts 0 everywhere (R² ≈ 0 minus the squared label mean over the label variance)."""

    @property
    def name(self) -> str:
        return "zero"

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        return torch.zeros_like(ys)


@dataclass(frozen=True)
class AveragingBaseline:
    """``ŷ_k = (1/k) Σ_{i<k} y_i`` — the mean of the context labels; 0 at k = 0."""

    @property
    def name(self) -> str:
        return "averaging"

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        n = ys.shape[1]
        # Exclusive prefix sums: shift the inclusive cumsum right by one so position k sees i < k only.
        sums = torch.cat([torch.zeros_like(ys[:, :1]), ys.cumsum(1)[:, :-1]], dim=1)
        k = torch.arange(n, dtype=ys.dtype, device=ys.device).clamp(min=1)
        return sums / k[None, :, None]


@dataclass(frozen=True)
class LeastSquaresBaseline:
    """Least squares on the first k examples of each prompt; 0 at k = 0.

    With ``ridge = 0`` (default) the solution is the minimum-norm one, ``w = pinv(X_k) Y_k`` (the
    interpolating solution for k < number of features, so its error peaks near k ≈ d_x, the interpolation
    threshold). With ``ridge = λ > 0`` it solves ``(X_kᵀ X_k + λ D) w = X_kᵀ Y_k`` (squared error summed,
    not averaged, over the k examples), where ``D`` is the identity except that the intercept is not
    penalised. ``intercept=True`` (default) appends a constant-1 feature: on the paper's ``N(-2, I)``
    inputs all points share a large offset, and the intercept makes the fit far stronger. With
    ``intercept=False`` and ``ridge=0`` this is Garg et al.'s ``LeastSquaresModel``.

    All prompts and all prefixes are solved at once: prefix k uses the design matrix with rows ``i >= k``
    zeroed, which leaves the min-norm and ridge solutions unchanged.
    """

    ridge: float = 0.0
    intercept: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.ridge, (int, float)) and math.isfinite(self.ridge) and self.ridge >= 0):
            raise InputError(f"ridge must be a finite number >= 0, got {self.ridge!r}")

    @property
    def name(self) -> str:
        base = "least_squares" if self.ridge == 0 else f"ridge_{self.ridge:g}"
        return base if self.intercept else f"{base}_no_intercept"

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        B, n, _ = xs.shape
        X = torch.cat([xs, torch.ones_like(xs[..., :1])], -1) if self.intercept else xs
        p = X.shape[-1]
        out = torch.empty_like(ys)
        solve = self._min_norm if self.ridge == 0 else self._ridge
        for c in _chunks(B, n * n * p + n * p * p):
            out[c] = solve(X[c], ys[c])
        out[:, 0] = 0
        return out

    @staticmethod
    def _min_norm(X: Tensor, Y: Tensor) -> Tensor:
        mask = _strict_lower(X.shape[1], X.device).to(X.dtype)  # (n, n)
        Xk = X[:, None] * mask[None, :, :, None]  # (B, n_prefix, n, p)
        Yk = Y[:, None] * mask[None, :, :, None]  # (B, n_prefix, n, d_y)
        W = torch.linalg.pinv(Xk) @ Yk  # (B, n_prefix, p, d_y)
        return (X[:, :, None, :] @ W).squeeze(-2)

    def _ridge(self, X: Tensor, Y: Tensor) -> Tensor:
        p = X.shape[2]
        # Exclusive prefix sums of x xᵀ and x yᵀ: G_k = Σ_{i<k} x_i x_iᵀ, R_k = Σ_{i<k} x_i y_iᵀ.
        outer = X[..., :, None] * X[..., None, :]
        G = torch.cat([torch.zeros_like(outer[:, :1]), outer.cumsum(1)[:, :-1]], 1)
        xy = X[..., :, None] * Y[..., None, :]
        R = torch.cat([torch.zeros_like(xy[:, :1]), xy.cumsum(1)[:, :-1]], 1)
        pen = torch.full((p,), float(self.ridge), dtype=X.dtype, device=X.device)
        if self.intercept:
            pen[-1] = 0
        G = G + torch.diag(pen)
        # k = 0 has G singular in the unpenalised intercept direction; its output is overwritten by 0.
        G[:, 0] += torch.eye(p, dtype=X.dtype, device=X.device)
        W = torch.linalg.solve(G, R)  # (B, n, p, d_y)
        return (X[:, :, None, :] @ W).squeeze(-2)


@dataclass(frozen=True)
class KNNBaseline:
    """Mean label of the ``k_nn`` (default 3) nearest context inputs (Euclidean, uniform weights).

    With fewer than ``k_nn`` context examples all of them are used; 0 at k = 0. Distances are computed
    by direct differences (not the ``|a|² + |b|² - 2ab`` shortcut) so neighbour order is exact.
    """

    k_nn: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.k_nn, int) or isinstance(self.k_nn, bool) or self.k_nn < 1:
            raise InputError(f"k_nn must be an integer >= 1, got {self.k_nn!r}")

    @property
    def name(self) -> str:
        return f"knn_{self.k_nn}"

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        B, n, d = xs.shape
        out = torch.empty_like(ys)
        later = ~_strict_lower(n, xs.device)  # (query k, example i): i >= k is not in the context
        kk = min(self.k_nn, n)
        for c in _chunks(B, n * n * (d + 1)):
            dist = torch.cdist(xs[c], xs[c], compute_mode="donot_use_mm_for_euclid_dist")
            dist = dist.masked_fill(later, math.inf)
            vals, idx = dist.topk(kk, dim=-1, largest=False)  # (b, n, kk)
            valid = vals.isfinite().to(ys.dtype)
            yb = ys[c]
            picked = yb[torch.arange(yb.shape[0], device=ys.device)[:, None, None], idx]  # (b, n, kk, d_y)
            total = (picked * valid[..., None]).sum(-2)
            out[c] = total / valid.sum(-1, keepdim=True).clamp(min=1)
        return out


# --------------------------------------------------------------------------------------------------
# The paper's baseline: an N-layer MLP trained on each prompt (docs/protocol.md, baselines)
# --------------------------------------------------------------------------------------------------


@dataclass
class MLPTrace:
    """Query predictions of [`MLPBaseline`][icdl.icl.baselines.simple.MLPBaseline] after every epoch.

    Attributes:
        preds: ``(epochs + 1, B, n, d_y)``; ``preds[e, :, k]`` is the prediction for ``x_k`` after ``e``
            Adam epochs on the k context examples (``e = 0`` is the untrained network). Position k = 0 is 0;
            positions not in ``ks`` are NaN.
        ks: the evaluated prefix lengths (k = 0 is always evaluated, as 0).
    """

    preds: Tensor
    ks: list[int]

    @property
    def epochs(self) -> int:
        return self.preds.shape[0] - 1

    def last(self) -> Tensor:
        """Predictions after the final epoch, ``(B, n, d_y)`` — the honest choice."""
        return self.preds[-1]

    def best(
        self, ys: Tensor, *, pooling: metrics.Pooling = "pooled", batch_size: int = 64
    ) -> tuple[Tensor, list[int | None]]:
        """The paper's oracle: for each k, the epoch in ``1..epochs`` with the highest R²(k) across prompts.

        Uses the query labels ``ys[:, k]`` to choose, so it is **not** a causal predictor (docs/protocol.md,
        baselines: "We select the highest R-squared value from each epoch"). Returns the predictions
        ``(B, n, d_y)`` and the chosen epoch per k (``None`` where not evaluated or k = 0).
        """
        ys = ys if ys.dim() == 3 else ys[..., None]
        if ys.shape != self.preds.shape[1:]:
            raise InputError(f"ys {tuple(ys.shape)} does not match the trace {tuple(self.preds.shape[1:])}")
        if self.epochs < 1:
            return self.last(), [None] * ys.shape[1]
        r2 = torch.stack(
            [
                metrics.r2_curve(self.preds[e], ys, pooling=pooling, batch_size=batch_size)
                for e in range(1, self.epochs + 1)
            ]
        )  # (epochs, n)
        r2 = torch.nan_to_num(r2, nan=-math.inf)
        choice = r2.argmax(0) + 1  # (n,)
        out = self.preds[choice.to(self.preds.device), :, torch.arange(ys.shape[1], device=self.preds.device)]
        out = out.transpose(0, 1)  # (B, n, d_y)
        evaluated = set(self.ks) - {0}
        epochs = [int(choice[k]) if k in evaluated else None for k in range(ys.shape[1])]
        return out, epochs


@dataclass
class MLPBaseline:
    """The paper's baseline (docs/protocol.md): train an N-layer MLP on each prompt's first k examples.

    Architecture: ``d_x -> width -> ... -> width -> d_y`` with ``depth`` linear layers (N-1 hidden ReLU
    layers, linear output), **with biases**; weights He-normal ``N(0, 2 / fan_in)``, biases 0. One network
    per (prompt, k), freshly initialised for every k (as in Garg et al.'s ``GDModel``) from a seed derived
    from ``(seed, k)``, so results do not depend on ``ks`` or ``chunk``.

    Training: full-batch Adam (``lr``, PyTorch defaults otherwise) on the mean squared error over the k
    context examples, ``epochs`` steps (one step = one epoch when the batch is the whole context). All
    prompts train in parallel as batched weights ``(B, fan_in, fan_out)`` — Adam is element-wise and the
    summed loss separates over prompts, so this equals B independent trainings. The query ``x_k`` is
    evaluated after every epoch ([`MLPTrace`][icdl.icl.baselines.simple.MLPTrace]).

    ``selection="last"`` returns the final-epoch predictions (causal, honest); ``"best"`` the paper's
    oracle epoch per k (uses the query labels; see
    [`MLPTrace.best`][icdl.icl.baselines.simple.MLPTrace.best]). ``ks`` restricts training to some prefix
    lengths (the others are NaN); ``chunk`` bounds memory by training that many prompts at a time (identical
    results).
    """

    depth: int
    width: int = 200
    lr: float = 5e-3
    epochs: int = 100
    seed: int = 0
    selection: Literal["last", "best"] = "last"
    ks: Sequence[int] | None = None
    chunk: int | None = None
    pooling: metrics.Pooling = "pooled"
    batch_size: int = 64

    def __post_init__(self) -> None:
        for key, low in (("depth", 1), ("width", 1), ("epochs", 0)):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise InputError(f"MLP baseline {key} must be an integer >= {low}, got {v!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"MLP baseline lr must be a finite number > 0, got {self.lr!r}")
        if self.selection not in ("last", "best"):
            raise InputError(f"selection must be 'last' or 'best', got {self.selection!r}")
        if self.chunk is not None and (not isinstance(self.chunk, int) or self.chunk < 1):
            raise InputError(f"chunk must be a positive integer or None, got {self.chunk!r}")

    @property
    def name(self) -> str:
        return f"mlp{self.depth}x{self.width}_{self.selection}"

    def layer_sizes(self, d_x: int, d_y: int) -> list[int]:
        return [d_x, *([self.width] * (self.depth - 1)), d_y]

    def init_params(self, k: int, num_prompts: int, d_x: int, d_y: int) -> list[tuple[Tensor, Tensor]]:
        """The initial ``[(W_j (B, fan_in, fan_out), b_j (B, 1, fan_out))]`` for prefix length k, float32 CPU.

        Drawn from a CPU generator seeded by ``(seed, k)``, layer by layer, so every device and chunking
        sees the same networks; tests use this to train one network alone from the same start.
        """
        g = torch.Generator().manual_seed(derived_seed(self.seed, k))
        sizes = self.layer_sizes(d_x, d_y)
        params = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            W = torch.randn(num_prompts, fan_in, fan_out, generator=g) * math.sqrt(2.0 / fan_in)
            params.append((W, torch.zeros(num_prompts, 1, fan_out)))
        return params

    def _ks(self, n: int) -> list[int]:
        if self.ks is None:
            return list(range(n))
        ks = sorted({int(k) for k in self.ks})
        bad = [k for k in ks if not 0 <= k < n]
        if bad:
            raise InputError(f"ks must lie in 0..{n - 1} for prompts of {n} points, got {bad}")
        return sorted({0, *ks})

    @staticmethod
    def _forward(params: list[tuple[Tensor, Tensor]], x: Tensor) -> Tensor:
        h = x
        for j, (W, b) in enumerate(params):
            h = torch.baddbmm(b, h, W)
            if j < len(params) - 1:
                h = torch.relu(h)
        return h

    def trace(self, xs: Tensor, ys: Tensor) -> MLPTrace:
        """Train on every evaluated prefix and return the per-epoch query predictions."""
        check_prompts(xs, ys)
        B, n, d_x = xs.shape
        d_y = ys.shape[-1]
        ks = self._ks(n)
        preds = torch.full((self.epochs + 1, B, n, d_y), math.nan, dtype=ys.dtype, device=ys.device)
        preds[:, :, 0] = 0
        chunk = self.chunk or B
        with torch.enable_grad():
            for k in ks:
                if k == 0:
                    continue
                init = self.init_params(k, B, d_x, d_y)
                for s in range(0, B, chunk):
                    c = slice(s, min(s + chunk, B))
                    preds[:, c, k] = self._train(init, c, xs[c, : k + 1].detach(), ys[c, :k].detach())
        return MLPTrace(preds=preds, ks=ks)

    def _train(self, init: list[tuple[Tensor, Tensor]], c: slice, x: Tensor, y: Tensor) -> Tensor:
        """Train one chunk of networks on ``x[:, :k], y`` and return query outputs ``(epochs+1, b, d_y)``."""
        params = [
            (W[c].to(x.device, x.dtype).requires_grad_(), b[c].to(x.device, x.dtype).requires_grad_())
            for W, b in init
        ]
        # The fused kernel is ~6x faster than foreach on CPU (benchmarks/bench_baselines.py) and computes
        # the same Adam update; fall back where a device has no fused implementation.
        fused = x.device.type in ("cpu", "cuda")
        opt = torch.optim.Adam([t for pair in params for t in pair], lr=self.lr, fused=fused)
        k = y.shape[1]
        outs = []
        for e in range(self.epochs + 1):
            # One pass over context + query: the query output is the evaluation after e epochs.
            out = self._forward(params, x if e < self.epochs else x[:, k:])
            outs.append(out[:, -1].detach())
            if e == self.epochs:
                break
            loss = ((out[:, :k] - y) ** 2).mean((1, 2)).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return torch.stack(outs)

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        tr = self.trace(xs, ys)
        if self.selection == "last":
            return tr.last()
        return tr.best(ys, pooling=self.pooling, batch_size=self.batch_size)[0]


# --------------------------------------------------------------------------------------------------
# Plain gradient descent on the target architecture (what the construction emulates)
# --------------------------------------------------------------------------------------------------


@dataclass
class GDBaseline:
    """L steps of (projected) GD on the bias-free N-layer network ``spec`` over each prompt's k examples.

    ``w_l = Proj(w_{l-1} - lr ∇L_k(w_{l-1}))`` with ``L_k(w) = (1/(2k)) Σ_{i<k} l(f(w, x_i), y_i)`` (paper
    eq. 2.2-2.3, Lemma 1 gradient from [`icdl.nets.gradient`][icdl.nets.gradient]), from one shared ``w0`` —
    the fixed starting point a constructed transformer bakes in. ``w0`` is drawn once from ``N(0, init_std²)``
    (He-scaled by default) with a CPU generator seeded by ``seed``, unless given. The prediction at k is
    ``f(w_L, x_k)``; at k = 0 there is no data, so GD stays at ``w0`` and predicts ``f(w0, x_0)``.

    ``lr`` should come from `tune_step_size` on held-out prompts; the grid, scores and chosen value
    are recorded in ``tuning``.
    """

    spec: nets.NetSpec
    steps: int = 1
    lr: float = 1e-2
    loss: str = "squared"
    seed: int = 0
    init_std: float = 1.0
    fan_in_scaling: bool = True
    box: float | None = None
    w0: Tensor | None = None
    tuning: dict[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.steps, int) or isinstance(self.steps, bool) or self.steps < 0:
            raise InputError(f"GD steps must be an integer >= 0, got {self.steps!r}")
        self._check_lr(self.lr)
        nets.get_loss(self.loss)
        if self.w0 is not None and self.w0.shape != (self.spec.num_params,):
            raise InputError(f"w0 must have shape ({self.spec.num_params},), got {tuple(self.w0.shape)}")

    @staticmethod
    def _check_lr(lr: float) -> None:
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise InputError(f"GD step size must be a finite number > 0, got {lr!r}")

    @property
    def name(self) -> str:
        return f"gd{self.spec.depth}x{self.spec.width}_L{self.steps}"

    def initial_weights(
        self, dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu"
    ) -> Tensor:
        """The shared starting point ``w0``, shape ``(P,)``."""
        if self.w0 is not None:
            return self.w0.to(device=device, dtype=dtype)
        g = torch.Generator().manual_seed(derived_seed(self.seed))
        w0 = nets.init_weights(
            self.spec, generator=g, std=self.init_std, fan_in_scaling=self.fan_in_scaling, dtype=torch.float64
        )
        return w0.to(device=device, dtype=dtype)

    def __call__(self, xs: Tensor, ys: Tensor, *, lr: float | None = None) -> Tensor:
        check_prompts(xs, ys)
        lr = self.lr if lr is None else lr
        self._check_lr(lr)
        B, n, d_x = xs.shape
        if d_x != self.spec.in_dim or ys.shape[-1] != self.spec.out_dim:
            raise InputError(
                f"prompts have d_x={d_x}, d_y={ys.shape[-1]}; the GD network expects "
                f"{self.spec.in_dim}, {self.spec.out_dim}"
            )
        w0 = self.initial_weights(xs.dtype, xs.device).expand(B, -1)
        out = torch.empty_like(ys)
        out[:, 0] = nets.forward(self.spec, w0, xs[:, :1])[:, 0]
        for k in range(1, n):
            w = w0
            xk, yk = xs[:, :k], ys[:, :k]
            for _ in range(self.steps):
                w = nets.project(w - lr * nets.gradient(self.spec, self.loss, w, xk, yk), self.box)
            out[:, k] = nets.forward(self.spec, w, xs[:, k : k + 1])[:, 0]
        return out

    def tune_step_size(
        self,
        xs_val: Tensor,
        ys_val: Tensor,
        grid: Sequence[float] = DEFAULT_LR_GRID,
        *,
        pooling: metrics.Pooling = "pooled",
        batch_size: int = 64,
    ) -> float:
        """Pick the step size in ``grid`` with the best mean R²(k) over ``k = 1..n-1`` on held-out prompts.

        Non-finite R² (divergence) counts as -inf. Sets ``self.lr`` and records ``self.tuning =
        {"grid", "mean_r2", "lr", "num_prompts"}``; returns the chosen step size. Use prompts that are not
        in the evaluation set.
        """
        grid = [float(g) for g in grid]
        if not grid:
            raise InputError("the step-size grid is empty")
        for g in grid:
            self._check_lr(g)
        check_prompts(xs_val, ys_val)
        if xs_val.shape[1] < 2:
            raise InputError("tuning needs prompts with at least 2 points (k >= 1)")
        scores = []
        for g in grid:
            with torch.no_grad():
                r2 = metrics.r2_curve(
                    self(xs_val, ys_val, lr=g), ys_val, pooling=pooling, batch_size=batch_size
                )
            r2 = r2[1:]
            score = float(r2.mean()) if bool(r2.isfinite().all()) else -math.inf
            scores.append(score)
        best = max(range(len(grid)), key=lambda i: scores[i])
        if not math.isfinite(scores[best]):
            raise InputError(f"GD diverged (non-finite R²) for every step size in {grid}")
        self.lr = grid[best]
        self.tuning = {
            "grid": grid,
            "mean_r2": [s if math.isfinite(s) else None for s in scores],
            "lr": self.lr,
            "num_prompts": int(xs_val.shape[0]),
            "pooling": pooling,
        }
        return self.lr
