"""What to compile: [`GDConfig`][icdl.construct.config.GDConfig] (network, loss, step size, steps, prompt
length, sums' accuracy and range, projection, variant, dtype) and its defaults. Re-exported by
[`icdl.construct.compile`][icdl.construct.compile] and [`icdl.construct`][icdl.construct].

It sits above the variant registry (a config is checked against its variant's own limits) and the a-priori
ranges (``radius="auto"``), and below the compiler; the code below it (the engine, the bounds, the
contract, the variants) reads a configuration through
[`StepConfig`][icdl.construct.protocols.StepConfig].
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor

from icdl.construct.bounds.ranges import resolve_auto_range
from icdl.construct.variants.registry import get_variant
from icdl.errors import InputError, reject_unknown_keywords
from icdl.nets import NetSpec, get_loss

__all__ = ["DTYPES", "GDConfig", "PromptTensors", "default_delta", "default_tol"]

DTYPES: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32}


def default_delta(dtype: str) -> float:
    """Default width of the relu' step window: 1e-9 in float64, 1e-5 in float32 (the step needs
    ``radius / delta`` below 2^mantissa so that ``X - 1`` is exact, see
    [`icdl.construct.engine.terms`][icdl.construct.engine.terms])."""
    return 1e-9 if dtype == "float64" else 1e-5


def default_tol(dtype: str) -> float:
    """Default relative tolerance of the sublayer check
    ([`icdl.construct.check.verify.verify`][icdl.construct.check.verify.verify]): 1e-9 in float64, 1e-4 in
    float32 (a valid float32 model's sublayers agree with their float32 reference only to a few hundred units
    of round-off, 2^-24 ~ 6e-8 each)."""
    return 1e-9 if dtype == "float64" else 1e-4


@dataclass(frozen=True)
class GDConfig:
    """What to compile.

    Attributes:
        spec: the network (paper Definition 1 / 10).
        loss: loss name (``icdl.nets.LOSSES``).
        lr: GD step size eta.
        steps: L, the number of GD steps (blocks).
        n: number of in-context examples (prompts have n + 1 tokens).
        eps: target sup error of every fitted ReLU sum (ignored where sums are exact).
        radius: range ``[-R, R]`` of the fitted sums and of the products' non-weight factors
            ([`GDConfig.create`][icdl.construct.compile.GDConfig.create] with ``radius="auto"`` sets it from
            the prompt, [`icdl.construct.bounds.ranges`][icdl.construct.bounds.ranges]).
        delta: relu' step window (None: [`default_delta`][icdl.construct.compile.default_delta]).
        box: box projection bound B (None: unprojected GD).
        gate: constant C of the query gate (Lemma 4) and readout; must exceed every |u| and |p(N)|.
        variant: construction name (``icdl.construct.variants.registry``).
        dtype: ``"float64"`` (verification) or ``"float32"``.
        weight_range: range of the weight factor of the products (the softmax variant's ``v * p`` and
            ``v * s``); None: the box B, or R without a box.
        auto_range: whether ``radius`` (and ``weight_range``) were set by ``radius="auto"`` (a record: the
            config itself holds the resolved numbers, so a saved model recompiles to the same weights).
    """

    spec: NetSpec
    loss: str = "squared"
    lr: float = 0.1
    steps: int = 1
    n: int = 16
    eps: float = 1e-3
    radius: float = 10.0
    delta: float | None = None
    box: float | None = None
    gate: float = 1e6
    variant: str = "paper"
    dtype: str = "float64"
    weight_range: float | None = None
    auto_range: bool = False

    def __post_init__(self) -> None:
        get_loss(self.loss)
        variant = get_variant(self.variant)
        if self.dtype not in DTYPES:
            raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if isinstance(self.radius, str):
            raise InputError(
                f"radius must be a number > 0, got {self.radius!r} "
                '(radius="auto" is resolved by GDConfig.create(..., prompt=(x, y, x_query, w0)))'
            )
        ints: tuple[tuple[str, int, int], ...] = (("steps", self.steps, 0), ("n (examples)", self.n, 1))
        for name, iv, low in ints:
            if not isinstance(iv, int) or isinstance(iv, bool) or iv < low:
                raise InputError(f"{name} must be an integer >= {low}, got {iv!r}")
        floats: tuple[tuple[str, float], ...] = (
            ("lr", self.lr),
            ("eps", self.eps),
            ("radius", self.radius),
            ("gate", self.gate),
        )
        for name, v in floats:
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise InputError(f"{name} must be a finite number > 0, got {v!r}")
        for name, opt in (("box", self.box), ("weight_range", self.weight_range)):
            if opt is not None and (not isinstance(opt, (int, float)) or not math.isfinite(opt) or opt <= 0):
                raise InputError(f"{name} must be a finite number > 0, got {opt!r}")
        if self.delta is None:
            object.__setattr__(self, "delta", default_delta(self.dtype))
        assert self.delta is not None
        if not math.isfinite(self.delta) or self.delta <= 0:
            raise InputError(f"delta must be a finite number > 0, got {self.delta!r}")
        mant = round(-math.log2(torch.finfo(DTYPES[self.dtype]).eps)) + 1  # 53 or 24
        if self.radius / self.delta >= 2.0 ** (mant - 1):
            raise InputError(
                f"delta={self.delta:g} is too small for {self.dtype}: the relu' step needs "
                f"radius/delta < 2^{mant - 1} "
                f"(use delta >= {self.radius / 2.0 ** (mant - 1):.1e})"
            )
        if variant.check is not None:
            variant.check(self)  # a variant's own limits (raises InputError)

    @classmethod
    def create(
        cls,
        spec: NetSpec,
        *,
        projection: str = "none",
        box: float | None = None,
        radius: float | str = 10.0,
        prompt: PromptTensors | None = None,
        **kw: Any,
    ) -> GDConfig:
        """A config from user-facing options: ``projection`` is ``"none"`` or ``"box"`` (which needs
        ``box``, the bound B of ``W = {|w_c| <= B}``). The one place that checks the projection options.

        ``radius="auto"`` (with ``prompt=(x, y, x_query, w0)``) sets the range R, and the softmax variant's
        weight range, from a-priori bounds along the whole GD trajectory on that prompt
        ([`resolve_auto_range`][icdl.construct.bounds.ranges.resolve_auto_range]); the result holds the
        numbers and ``auto_range=True``."""
        if projection not in ("none", "box"):
            raise InputError(f"projection must be 'none' or 'box', got {projection!r}")
        if projection == "box" and box is None:
            raise InputError("projection 'box' needs a bound: pass box=B (--box B)")
        if projection == "none" and box is not None:
            raise InputError("box is only used with projection 'box' (--projection box)")
        known = [f.name for f in fields(cls) if f.name not in ("spec", "box", "radius")]
        known += ["projection", "box", "radius", "prompt"]
        reject_unknown_keywords({k: v for k, v in kw.items() if k not in known}, known, "GDConfig.create")
        if radius == "auto":
            if prompt is None:
                raise InputError(
                    'radius="auto" (--range auto) needs the prompt: pass prompt=(x, y, x_query, w0)'
                )
            cfg = cls(spec=spec, box=box, **kw)
            return resolve_auto_range(cfg, prompt, get_variant(cfg.variant).range_needs)
        if isinstance(radius, str):
            raise InputError(f'radius must be a number > 0 or "auto", got {radius!r}')
        return cls(spec=spec, box=box, radius=radius, **kw)

    @property
    def projection(self) -> str:
        return "none" if self.box is None else "box"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = {k: v for k, v in d["spec"].items() if not k.startswith("_")}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GDConfig:
        return cls(**{**d, "spec": NetSpec(**d["spec"])})


#: A prompt ``(x, y, x_query, w0)``: ``(n, d_x)``, ``(n, d_y)``, ``(d_x,)``, ``(P,)``.
PromptTensors = tuple[Tensor, Tensor, Tensor, Tensor]
