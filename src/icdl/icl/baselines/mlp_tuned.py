"""``mlp_tuned``: a small MLP fitted on each prompt's k examples, its settings tuned on held-out prompts.

The paper's MLP baseline ([`icdl.icl.baselines.simple.MLPBaseline`][icdl.icl.baselines.simple.MLPBaseline]:
width 200, one learning rate, random output layer, 64 prompts) is dominated by its random-initialisation
output noise at small k. This one is the honest version of it (docs/baselines.md):

* an N-layer ReLU MLP with biases (N = the task's depth), hidden layers He-normal from ONE seeded draw per
  (seed, k, width) shared by all prompts, and a ZERO output layer — untrained, it predicts 0, the prior
  mean of a centred task, not noise;
* trained per prompt and per k on the k context examples only (causal: the prediction for ``x_k`` uses
  ``x_{<=k}, y_{<k}``) by full-batch AdamW on the mean squared error (decoupled weight decay, as
  ``torch.optim.AdamW``);
* the setting ``(width, lr, weight decay, epochs)`` is chosen per k from a small grid by the lowest MSE on
  HELD-OUT prompts ([`MLPTunedBaseline.tune`][icdl.icl.baselines.mlp_tuned.MLPTunedBaseline.tune]), never the
  test
  prompts. Tuning runs at a few anchor k (``ANCHOR_KS``, plus the longest k) and every k takes the setting
  of its nearest anchor in log k; the epoch counts are checkpoints of one run, so they cost nothing extra.
  When an anchor's choice lies on the grid's lr, weight-decay or width edge, the grid is widened there
  (``widen`` rounds, one value beyond the edge each; issue 27: the pilot choice sat in a corner), and
  ``tuning["edge"]`` reports the edges the final choice still touches (``estimate_flops`` counts the
  base grid only).

All networks train at once: a grid of G (lr, weight decay) pairs on B prompts is G·B networks with batched
weights ``(G·B, fan_in, fan_out)`` (``torch.baddbmm``); the summed loss separates over networks and AdamW
is element-wise, so this equals G·B independent trainings (tested against a plain per-prompt
``torch.optim.AdamW`` loop). A prediction that is not finite (not seen with the default grid) is replaced
by 0 and counted in ``fallbacks``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.icl.baselines.simple import check_prompts, derived_seed

__all__ = [
    "ANCHOR_KS",
    "DEFAULT_EPOCHS",
    "DEFAULT_LRS",
    "DEFAULT_WEIGHT_DECAYS",
    "DEFAULT_WIDTHS",
    "MLPSetting",
    "MLPTunedBaseline",
    "estimate_flops",
    "fit_predict",
    "init_params",
]

DEFAULT_LRS: tuple[float, ...] = (3e-3, 1e-2, 3e-2)
# AdamW's decoupled decay: each step multiplies the weights by 1 - lr·wd. A pilot on the centred task
# (128 held-out prompts, wd in {0, 0.1, 1}) chose the largest, 1.0, at every anchor, so the grid reaches 3.
DEFAULT_WEIGHT_DECAYS: tuple[float, ...] = (0.0, 0.3, 1.0, 3.0)
DEFAULT_WIDTHS: tuple[int, ...] = (16, 32)
DEFAULT_EPOCHS: tuple[int, ...] = (10, 30, 100)
ANCHOR_KS: tuple[int, ...] = (1, 2, 4, 8, 15, 30, 45, 60, 90)
_BETAS = (0.9, 0.999)
_EPS = 1e-8


@dataclass(frozen=True)
class MLPSetting:
    """One grid point: hidden ``width``, AdamW ``lr`` and ``weight_decay``, full-batch ``epochs``."""

    width: int
    lr: float
    weight_decay: float
    epochs: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def init_params(
    depth: int, width: int, d_x: int, d_y: int, *, seed: int, k: int
) -> list[tuple[Tensor, Tensor]]:
    """The shared start ``[(W_j (fan_in, fan_out), b_j (fan_out,))]`` (float64, CPU) for prefix length k.

    Hidden layers He-normal ``N(0, 2 / fan_in)`` from a generator seeded by ``(seed, k, width)``, biases 0;
    the output layer (weights and bias) is 0, so the untrained network predicts 0.
    """
    g = torch.Generator().manual_seed(derived_seed(seed, k, width))
    sizes = [d_x, *([width] * (depth - 1)), d_y]
    params = []
    for j in range(depth):
        fan_in, fan_out = sizes[j], sizes[j + 1]
        if j < depth - 1:
            W = torch.randn(fan_in, fan_out, generator=g, dtype=torch.float64) * math.sqrt(2.0 / fan_in)
        else:
            W = torch.zeros(fan_in, fan_out, dtype=torch.float64)
        params.append((W, torch.zeros(fan_out, dtype=torch.float64)))
    return params


def _forward(params: Sequence[tuple[Tensor, Tensor]], x: Tensor) -> Tensor:
    h = x
    for j, (W, b) in enumerate(params):
        h = torch.baddbmm(b, h, W)
        if j < len(params) - 1:
            h = torch.relu(h)
    return h


def fit_predict(
    xs: Tensor,
    ys: Tensor,
    k: int,
    *,
    depth: int,
    width: int,
    lrs: Sequence[float],
    weight_decays: Sequence[float],
    epochs: Sequence[int],
    seed: int = 0,
    differentiable: bool = False,
) -> Tensor:
    """Query predictions of ``G·B`` MLPs, each trained on one prompt's first ``k`` examples.

    ``xs (B, >k, d_x)``, ``ys (B, >=k, d_y)``; network ``(g, b)`` uses ``lrs[g]`` and
    ``weight_decays[g]`` (G = ``len(lrs)``) on prompt b, from
    [`init_params`][icdl.icl.baselines.mlp_tuned.init_params]. Full-batch AdamW (betas 0.9/0.999, eps 1e-8,
    bias-corrected, decay ``p <- p (1 - lr·wd)`` before the Adam step, as ``torch.optim.AdamW``) on ``mean_i
    ||f(x_i) - y_i||²`` over ``i < k``. Returns ``(len(epochs), G, B, d_y)``: the prediction for ``x_k`` after
    each epoch count in ``epochs``.

    ``differentiable``: the same updates written out of place with ``create_graph``, so the predictions
    are differentiable in ``xs`` and ``ys`` THROUGH the training (for ``icdl align``'s sensitivities). Where
    a second moment is still exactly 0 (a weight whose gradient has been 0 at every step so far, e.g. the
    hidden layers at step 1 under the zero output layer) ``sqrt`` is not differentiable; its derivative is
    taken as 0 there (the values are unchanged).
    """
    if len(lrs) != len(weight_decays) or not lrs:
        raise InputError("fit_predict needs one weight decay per learning rate")
    B, _, d_x = xs.shape
    d_y = ys.shape[-1]
    G = len(lrs)
    x = xs[:, : k + 1].repeat(G, 1, 1)  # (G·B, k+1, d_x), grid-major
    y = ys[:, :k].repeat(G, 1, 1)
    dt, dev = xs.dtype, xs.device
    lr = torch.tensor(lrs, dtype=dt, device=dev).repeat_interleave(B)[:, None, None]
    wd = torch.tensor(weight_decays, dtype=dt, device=dev).repeat_interleave(B)[:, None, None]
    params = [
        (W.to(dev, dt).expand(G * B, -1, -1).clone(), b.to(dev, dt).expand(G * B, 1, -1).clone())
        for W, b in init_params(depth, width, d_x, d_y, seed=seed, k=k)
    ]
    flat = [t.requires_grad_() for pair in params for t in pair]
    m1 = [torch.zeros_like(t) for t in flat]
    m2 = [torch.zeros_like(t) for t in flat]
    want = sorted(set(int(e) for e in epochs))
    out: dict[int, Tensor] = {}
    for step in range(want[-1] + 1):
        with torch.enable_grad():
            pred = _forward(list(zip(flat[0::2], flat[1::2], strict=True)), x)
        if step in want:
            got = pred[:, k].reshape(G, B, d_y)
            out[step] = got if differentiable else got.detach()
        if step == want[-1]:
            break
        with torch.enable_grad():
            loss = ((pred[:, :k] - y) ** 2).mean((1, 2)).sum()
            grads = torch.autograd.grad(loss, flat, create_graph=differentiable)
        if differentiable:
            with torch.enable_grad():
                flat, m1, m2 = _adamw_out_of_place(flat, list(grads), m1, m2, step + 1, lr, wd)
        else:
            with torch.no_grad():
                _adamw_in_place(flat, list(grads), m1, m2, step + 1, lr, wd)
    return torch.stack([out[int(e)] for e in epochs])


def _adamw_in_place(
    flat: list[Tensor],
    grads: list[Tensor],
    m1: list[Tensor],
    m2: list[Tensor],
    t: int,
    lr: Tensor,
    wd: Tensor,
) -> None:
    """One AdamW step (as ``torch.optim.AdamW``: decay, then the bias-corrected Adam step), in place."""
    b1, b2 = _BETAS
    for p, gr, m, v in zip(flat, grads, m1, m2, strict=True):
        p.mul_(1 - lr * wd)
        m.mul_(b1).add_(gr, alpha=1 - b1)
        v.mul_(b2).addcmul_(gr, gr, value=1 - b2)
        denom = (v.sqrt() / math.sqrt(1 - b2**t)).add_(_EPS)
        p.sub_(lr / (1 - b1**t) * m / denom)


def _adamw_out_of_place(
    flat: list[Tensor],
    grads: list[Tensor],
    m1: list[Tensor],
    m2: list[Tensor],
    t: int,
    lr: Tensor,
    wd: Tensor,
) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """``_adamw_in_place`` as new tensors (autograd records it); the
    square root's derivative is 0 where the second moment is exactly 0 (``fit_predict``)."""
    b1, b2 = _BETAS
    ps, ms, vs = [], [], []
    for p, gr, m, v in zip(flat, grads, m1, m2, strict=True):
        p = p * (1 - lr * wd)
        m = torch.add(m * b1, gr, alpha=1 - b1)
        v = torch.addcmul(v * b2, gr, gr, value=1 - b2)
        pos = v > 0
        root = torch.where(pos, torch.where(pos, v, torch.ones_like(v)).sqrt(), torch.zeros_like(v))
        denom = root / math.sqrt(1 - b2**t) + _EPS
        ps.append(p - lr / (1 - b1**t) * m / denom)
        ms.append(m)
        vs.append(v)
    return ps, ms, vs


def estimate_flops(n: int, d_x: int, d_y: int, depth: int, tune_prompts: int, test_prompts: int) -> float:
    """A-priori FLOPs of tuning (default grid, every anchor below n) and predicting at every k < n:
    ``6 · params · points`` per network and epoch, plus ~20 flops per parameter for AdamW."""
    anchors = sorted({a for a in ANCHOR_KS if a < n} | {max(n - 1, 1)})
    pairs = len(DEFAULT_LRS) * len(DEFAULT_WEIGHT_DECAYS)
    total = 0.0
    for w in DEFAULT_WIDTHS:
        params = d_x * w + (depth - 2) * w * w + w * d_y + (depth - 1) * w + d_y
        per = max(DEFAULT_EPOCHS) * params
        total += pairs * tune_prompts * sum(per * (6 * (a + 1) + 20) for a in anchors)
        total += test_prompts * sum(per * (6 * (k + 1) + 20) for k in range(1, n)) / len(DEFAULT_WIDTHS)
    return total


def _chunked(vals: list[float], size: int) -> list[list[float]]:
    return [vals[i : i + size] for i in range(0, len(vals), size)]


def _nearest_anchor(k: int, anchors: Sequence[int]) -> int:
    """The anchor closest to k in log scale (ties to the smaller anchor)."""
    return min(anchors, key=lambda a: (abs(math.log(a) - math.log(k)), a))


@dataclass
class MLPTunedBaseline:
    """Per-prompt MLP with ``(width, lr, weight decay, epochs)`` chosen per k on held-out prompts.

    ``depth`` is the network's number of linear layers (the task's depth). ``settings`` (one
    [`MLPSetting`][icdl.icl.baselines.mlp_tuned.MLPSetting] per k, ``None`` at k = 0) is set by `tune`;
    ``tuning`` records the grid, the held-out MSE per anchor and setting, and the choices.
    """

    depth: int = 3
    widths: Sequence[int] = DEFAULT_WIDTHS
    lrs: Sequence[float] = DEFAULT_LRS
    weight_decays: Sequence[float] = DEFAULT_WEIGHT_DECAYS
    epochs: Sequence[int] = DEFAULT_EPOCHS
    anchors: Sequence[int] = ANCHOR_KS
    seed: int = 0
    widen: int = 2
    settings: list[MLPSetting | None] | None = None
    tuning: dict[str, Any] | None = field(default=None)
    fallbacks: int = 0

    def __post_init__(self) -> None:
        ints = {"depth": [self.depth], "widths": list(self.widths), "epochs": list(self.epochs)}
        ints["anchors"] = list(self.anchors)
        for key, vals in ints.items():
            if not vals or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in vals):
                raise InputError(f"mlp_tuned {key} must be integers >= 1, got {vals!r}")
        if not self.lrs or not all(math.isfinite(v) and v > 0 for v in self.lrs):
            raise InputError("mlp_tuned learning rates must be finite numbers > 0")
        if not self.weight_decays or not all(math.isfinite(v) and v >= 0 for v in self.weight_decays):
            raise InputError("mlp_tuned weight decays must be finite numbers >= 0")
        if not isinstance(self.widen, int) or isinstance(self.widen, bool) or self.widen < 0:
            raise InputError(f"mlp_tuned widen must be an integer >= 0, got {self.widen!r}")

    @property
    def name(self) -> str:
        return "mlp_tuned"

    def grid(self) -> list[MLPSetting]:
        """Every setting, width-major then lr, weight decay, epochs (the order of ``tuning["mse"]``)."""
        return [
            MLPSetting(int(w), float(lr), float(wd), int(e))
            for w in self.widths
            for lr in self.lrs
            for wd in self.weight_decays
            for e in self.epochs
        ]

    def _grid_mse(
        self,
        xs: Tensor,
        ys: Tensor,
        k: int,
        pairs: Sequence[tuple[float, float]] | None = None,
        widths: Sequence[int] | None = None,
    ) -> list[float]:
        """Held-out MSE at prefix k of every grid setting (non-finite -> +inf); ``pairs`` / ``widths``
        restrict it to those (lr, weight decay) pairs and widths (width-major, then pair, then epochs)."""
        if pairs is None:
            pairs = [(lr, wd) for lr in self.lrs for wd in self.weight_decays]
        out = []
        for w in self.widths if widths is None else widths:
            preds = fit_predict(
                xs, ys, k, depth=self.depth, width=int(w), lrs=[p[0] for p in pairs],
                weight_decays=[p[1] for p in pairs], epochs=self.epochs, seed=self.seed,
            )  # fmt: skip
            err = ((preds - ys[None, None, :, k]) ** 2).mean((2, 3))  # (E, G)
            for g in range(len(pairs)):
                for e in range(len(self.epochs)):
                    v = float(err[e, g])
                    out.append(v if math.isfinite(v) else math.inf)
        return out

    def tune(self, xs_val: Tensor, ys_val: Tensor) -> list[MLPSetting | None]:
        """Choose a setting per k from the held-out prompts ``xs_val, ys_val`` (NOT the test prompts).

        At each anchor k (``anchors`` below the prompt length, plus the longest k) every grid setting is
        trained on every held-out prompt and scored by its MSE on the query; the lowest wins (ties to the
        earlier grid setting). Every k = 1..n-1 takes its nearest anchor's setting. Sets ``settings`` and
        ``tuning``; returns ``settings``.
        """
        check_prompts(xs_val, ys_val)
        n = xs_val.shape[1]
        if n < 2:
            raise InputError("tuning needs prompts with at least 2 points (k >= 1)")
        anchors = sorted({a for a in self.anchors if a < n} | {n - 1})
        grid = self.grid()
        table: dict[int, list[float]] = {}
        chosen: dict[int, MLPSetting] = {}
        widened: dict[int, list[dict[str, Any]]] = {}
        with torch.no_grad():
            for a in anchors:
                row = self._grid_mse(xs_val, ys_val, a)
                table[a] = row
                best = min(range(len(grid)), key=row.__getitem__)
                if not math.isfinite(table[a][best]):
                    raise InputError(f"mlp_tuned: every setting diverged at k = {a}")
                chosen[a], widened[a] = self._widen(xs_val, ys_val, a, dict(zip(grid, row, strict=True)))
        self.settings = [None] + [chosen[_nearest_anchor(k, anchors)] for k in range(1, n)]
        self.tuning = {
            "grid": [s.to_dict() for s in grid],
            "anchors": anchors,
            "mse": {str(a): [v if math.isfinite(v) else None for v in table[a]] for a in anchors},
            "chosen": {str(a): chosen[a].to_dict() for a in anchors},
            "widened": {str(a): widened[a] for a in anchors},
            "edge": {str(a): self._edges(chosen[a]) for a in anchors},
            "num_prompts": int(xs_val.shape[0]),
        }
        return self.settings

    def _edges(self, s: MLPSetting, scores: dict[MLPSetting, float] | None = None) -> list[str]:
        """The grid edges ``s`` sits on, among the settings scored so far (axes with one value have none):
        ``lr_low``, ``lr_high``, ``wd_high``, ``width_high``, ``epochs_high``."""
        seen = list(scores) if scores is not None else self.grid()
        lrs = sorted({t.lr for t in seen})
        wds = sorted({t.weight_decay for t in seen})
        widths = sorted({t.width for t in seen})
        out = []
        if len(lrs) > 1 and s.lr == lrs[0]:
            out.append("lr_low")
        if len(lrs) > 1 and s.lr == lrs[-1]:
            out.append("lr_high")
        if len(wds) > 1 and s.weight_decay == wds[-1]:
            out.append("wd_high")
        if len(widths) > 1 and s.width == widths[-1]:
            out.append("width_high")
        if len(self.epochs) > 1 and s.epochs == max(self.epochs):
            out.append("epochs_high")
        return out

    def _widen(
        self, xs: Tensor, ys: Tensor, k: int, scores: dict[MLPSetting, float]
    ) -> tuple[MLPSetting, list[dict[str, Any]]]:
        """Up to ``widen`` rounds at anchor k: while the best setting lies on the lr, weight-decay or width
        edge of the settings scored so far, score one more value beyond that edge (lr ÷ or × 3, weight
        decay × 3, width × 2) with every value of the other axes. Returns the best setting and the added
        scores. The epoch axis is not widened (its checkpoints share one run); an ``epochs_high`` choice
        stays visible in ``tuning["edge"]``."""
        added: list[dict[str, Any]] = []
        for _ in range(self.widen):
            best = min(scores, key=lambda t: (scores[t], self.grid().index(t) if t in self.grid() else 0))
            edges = [e for e in self._edges(best, scores) if e != "epochs_high"]
            if not edges:
                break
            lrs = sorted({t.lr for t in scores})
            wds = sorted({t.weight_decay for t in scores})
            widths = sorted({t.width for t in scores})
            new_lrs = ([lrs[0] / 3] if "lr_low" in edges else []) + (
                [lrs[-1] * 3] if "lr_high" in edges else []
            )
            new_wds = [max(wds[-1], 0.1) * 3] if "wd_high" in edges else []
            new_widths = [widths[-1] * 2] if "width_high" in edges else []
            all_lrs, all_wds = lrs + new_lrs, wds + new_wds
            for w in [*widths, *new_widths]:
                pairs = [
                    (lr, wd) for lr in all_lrs for wd in all_wds
                    if w in new_widths or lr in new_lrs or wd in new_wds
                ]  # fmt: skip
                if not pairs:  # an old width when only the width grew: nothing new to fit there
                    continue
                row = self._grid_mse(xs, ys, k, pairs=pairs, widths=[w])
                for (lr, wd), vals in zip(pairs, _chunked(row, len(self.epochs)), strict=True):
                    for e, v in zip(self.epochs, vals, strict=True):
                        t = MLPSetting(int(w), float(lr), float(wd), int(e))
                        scores[t] = v
                        added.append({**t.to_dict(), "mse": v if math.isfinite(v) else None})
        best = min(scores, key=lambda t: (scores[t], self.grid().index(t) if t in self.grid() else 0))
        return best, added

    def setting(self, k: int) -> MLPSetting:
        """The tuned setting at k >= 1 (k beyond the tuned prompts' length reuses the last one)."""
        if self.settings is None:
            raise InputError("mlp_tuned: settings are not set; call tune() on held-out prompts")
        s = self.settings[min(k, len(self.settings) - 1)]
        assert s is not None
        return s

    def predict_last(self, xs: Tensor, ys: Tensor) -> Tensor:
        """The prediction for the LAST point only, ``(B, d_y)``, differentiable in ``xs`` and ``ys`` through
        the training (``fit_predict(differentiable=True)``): the tuned MLP at k = n - 1 trained on ``x_{<k},
        y_{<k}`` (``ys[:, k]`` is not read). What ``icdl align`` differentiates
        ([`last_point`][icdl.icl.analysis.sensitivity.last_point]); no fallback (a non-finite value stays)."""
        check_prompts(xs, ys)
        k = xs.shape[1] - 1
        if k < 1:
            raise InputError("mlp_tuned predicts from at least one context example (k >= 1)")
        s = self.setting(k)
        return fit_predict(
            xs, ys, k, depth=self.depth, width=s.width, lrs=[s.lr], weight_decays=[s.weight_decay],
            epochs=[s.epochs], seed=self.seed, differentiable=True,
        )[0, 0]  # fmt: skip

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        """Predictions ``(B, n, d_y)``: 0 at k = 0, the tuned MLP trained on ``x_{<k}, y_{<k}`` at ``x_k``."""
        check_prompts(xs, ys)
        out = torch.zeros_like(ys)
        self.fallbacks = 0
        with torch.no_grad():
            for k in range(1, xs.shape[1]):
                s = self.setting(k)
                p = fit_predict(
                    xs, ys, k, depth=self.depth, width=s.width, lrs=[s.lr], weight_decays=[s.weight_decay],
                    epochs=[s.epochs], seed=self.seed,
                )[0, 0]  # fmt: skip
                bad = ~p.isfinite()
                self.fallbacks += int(bad.any(-1).sum())
                out[:, k] = torch.where(bad, torch.zeros_like(p), p)
        return out
