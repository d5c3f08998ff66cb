"""Compile the GD transformer: a configuration in, a :class:`CompiledModel` (an ``nn.Module``) out.

Usage::

    from icdl.nets import NetSpec, init_weights
    from icdl.construct import compile_gd_transformer

    spec = NetSpec(depth=3, width=8, in_dim=4, out_dim=2)
    model = compile_gd_transformer(spec, lr=0.1, steps=5, n=16)        # (2N+4)*5 sublayers + readout
    H = model.build_prompt(x, y, x_query, w0)                          # (B, n+1, D)
    out = model(H)
    model.read_weights(out)     # w^(5) — equal to 5 steps of reference GD
    model.read_prediction(out)  # f(w^(5), x_query)

All L blocks are the same function: the block is built once and applied L times (Theorem 1's "L identical
blocks"). The weights depend on n through the (n+1)/(2n) factor of the update layer (paper-notes §10.16), so
the model records n and rejects prompts of another length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import Tensor, nn

from icdl.construct.blocks import BuildContext, SublayerInfo
from icdl.construct.layout import Layout
from icdl.construct.terms import Terms, Terms2, activation_terms, loss_terms
from icdl.construct.variants import get_variant
from icdl.errors import InputError
from icdl.nets import NetSpec, get_loss

__all__ = [
    "CompiledModel",
    "GDConfig",
    "TraceFn",
    "build_prompt",
    "compile_gd_transformer",
    "default_delta",
    "sample_task",
]

DTYPES: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32}

# Called after every sublayer: (step, index in block, sublayer info, H). step == steps means the readout.
TraceFn = Callable[[int, int, SublayerInfo, Tensor], None]


def default_delta(dtype: str) -> float:
    """Default width of the relu' step window: 1e-9 in float64, 1e-5 in float32 (the step needs
    ``radius / delta`` below 2^mantissa so that ``X - 1`` is exact, see :mod:`icdl.construct.terms`)."""
    return 1e-9 if dtype == "float64" else 1e-5


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
        radius: range ``[-R, R]`` of the fitted sums.
        delta: relu' step window (None: :func:`default_delta`).
        box: box projection bound B (None: unprojected GD).
        gate: constant C of the query gate (Lemma 4) and readout; must exceed every |u| and |p(N)|.
        variant: construction name (``icdl.construct.variants``).
        dtype: ``"float64"`` (verification) or ``"float32"``.
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

    def __post_init__(self) -> None:
        get_loss(self.loss)
        get_variant(self.variant)
        if self.dtype not in DTYPES:
            raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name, v, low in (("steps", self.steps, 0), ("n (examples)", self.n, 1)):
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise InputError(f"{name} must be an integer >= {low}, got {v!r}")
        for name, v in (("lr", self.lr), ("eps", self.eps), ("radius", self.radius), ("gate", self.gate)):
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise InputError(f"{name} must be a finite number > 0, got {v!r}")
        if self.box is not None and (not math.isfinite(self.box) or self.box <= 0):
            raise InputError(f"box must be a finite number > 0, got {self.box!r}")
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


@dataclass
class _Terms:
    r: tuple[Terms, ...]
    r_prime: tuple[Terms, ...]
    u: Terms2
    extra: dict[str, Any] = field(default_factory=dict)


def _fetch_terms(cfg: GDConfig) -> _Terms:
    spec = cfg.spec
    assert cfg.delta is not None
    cache: dict[tuple[str, bool], Terms] = {}

    def get(name: str, deriv: bool) -> Terms:
        if (name, deriv) not in cache:
            cache[(name, deriv)] = activation_terms(
                name, derivative=deriv, eps=cfg.eps, radius=cfg.radius, delta=cfg.delta
            )
        return cache[(name, deriv)]

    acts = [spec.layer_act(j).name for j in range(1, spec.depth + 1)]
    return _Terms(
        r=tuple(get(a, False) for a in acts),
        r_prime=tuple(get(a, True) for a in acts),
        u=loss_terms(cfg.loss, eps=cfg.eps, radius=cfg.radius),
    )


class CompiledModel(nn.Module):
    """The compiled transformer: ``L`` applications of one block of sublayers, then the readout.

    Attributes:
        config: the :class:`GDConfig` it was compiled from.
        layout: the token layout.
        block: the sublayers of one GD step (``2N+4`` for the paper's variant), each with ``.info``.
        readout: the readout sublayers (``N+1``).
        terms: the conditioned ReLU sums used (``r``, ``r_prime`` per layer; ``u``).
    """

    def __init__(
        self,
        config: GDConfig,
        layout: Layout,
        block: list[nn.Module],
        readout: list[nn.Module],
        terms: _Terms,
    ) -> None:
        super().__init__()
        self.config = config
        self.layout = layout
        self.block = nn.ModuleList(block)
        self.readout = nn.ModuleList(readout)
        self.terms = terms

    # -- sizes --------------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.config.n

    @property
    def steps(self) -> int:
        return self.config.steps

    @property
    def spec(self) -> NetSpec:
        return self.config.spec

    @property
    def embedding_dim(self) -> int:
        return self.layout.dim

    @property
    def sublayers_per_step(self) -> int:
        return len(self.block)

    @property
    def num_sublayers(self) -> int:
        """``(2N+4) L`` for the paper's variant (readout excluded, as in Theorem 1)."""
        return len(self.block) * self.steps

    @property
    def readout_sublayers(self) -> int:
        return len(self.readout)

    def infos(self) -> list[SublayerInfo]:
        return [m.info for m in self.block]  # type: ignore[misc]

    @property
    def max_heads(self) -> int:
        return max(getattr(m, "num_heads", 0) for m in [*self.block, *self.readout])

    def parameter_counts(self) -> dict[str, int]:
        """Coefficient counts (index tables excluded).

        * ``stored``: compact coefficients of all ``(2N+4)L`` + readout sublayers, counting each of the L
          applications of the block as its own layer (as the paper's (2N+4)L-layer model would);
        * ``unique``: the same with the shared block counted once (what the model holds and saves);
        * ``dense``: the paper's dense form (``Q_m, K_m, V_m in R^{D x D}`` per head; ``W_1, W_2`` per MLP);
        * ``nonzero``: non-zero entries of the dense form, all sublayers counted.
        """
        L = self.steps

        def tot(mods: Any, fn: str) -> int:
            return sum(getattr(m, fn)() for m in mods)

        return {
            "stored": L * tot(self.block, "stored_coefficients") + tot(self.readout, "stored_coefficients"),
            "unique": tot(self.block, "stored_coefficients") + tot(self.readout, "stored_coefficients"),
            "dense": L * tot(self.block, "dense_parameters") + tot(self.readout, "dense_parameters"),
            "nonzero": L * tot(self.block, "nonzero_coefficients")
            + tot(self.readout, "nonzero_coefficients"),
        }

    # -- prompts --------------------------------------------------------------------------------------
    def build_prompt(self, x: Tensor, y: Tensor, x_query: Tensor, w0: Tensor) -> Tensor:
        """See :func:`build_prompt`; checks that the prompt has this model's n."""
        if x.shape[-2] != self.n:
            raise InputError(f"the model was compiled for n={self.n} examples; got {x.shape[-2]}")
        return build_prompt(self.layout, x, y, x_query, w0, dtype=self.config.torch_dtype)

    def check_prompt(self, H: Tensor) -> None:
        """Raise :class:`InputError` unless ``H`` is ``(B, n+1, D)`` for this model."""
        if H.dim() != 3 or H.shape[-1] != self.layout.dim:
            raise InputError(
                f"expected a prompt of shape (B, {self.n + 1}, {self.layout.dim}), got {tuple(H.shape)}"
            )
        if H.shape[1] != self.n + 1:
            raise InputError(
                f"the model was compiled for n={self.n} examples ({self.n + 1} tokens): "
                "its update weights carry "
                f"the factor (n+1)/(2n); the prompt has {H.shape[1]} tokens"
            )

    def read_weights(self, H: Tensor, token: int = -1) -> Tensor:
        """The W slot of one token (default: the query), shape ``(B, P)``."""
        return H[:, token, self.layout.indices("W")]

    def read_prediction(self, H: Tensor) -> Tensor:
        """The query token's Y slot, shape ``(B, d_y)``: ``f(w^(L), x_query)`` after the readout."""
        return H[:, -1, self.layout.indices("Y")]

    # -- running ----------------------------------------------------------------------------------------
    def run(self, H: Tensor, trace: TraceFn | None = None, readout: bool = True) -> Tensor:
        """Apply the L blocks (and the readout), calling ``trace(step, index, info, H)`` after each sublayer.

        ``step`` is 0-based; readout sublayers are reported with ``step == steps``.
        """
        self.check_prompt(H)
        with torch.no_grad():
            for step in range(self.steps):
                for i, m in enumerate(self.block):
                    H = m(H)
                    if trace is not None:
                        trace(step, i, m.info, H)  # type: ignore[arg-type]
            if readout:
                for i, m in enumerate(self.readout):
                    H = m(H)
                    if trace is not None:
                        trace(self.steps, i, m.info, H)  # type: ignore[arg-type]
        return H

    def forward(self, H: Tensor) -> Tensor:
        return self.run(H)

    # -- description ------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Sizes for reports and ``--json``."""
        counts = self.parameter_counts()
        return {
            "variant": self.config.variant,
            "sublayers": self.num_sublayers,
            "sublayers_per_step": self.sublayers_per_step,
            "readout_sublayers": self.readout_sublayers,
            "embedding_dim": self.embedding_dim,
            "max_heads": self.max_heads,
            "parameters": {k: counts[k] for k in ("stored", "unique", "dense")},
            "nonzero_parameters": counts["nonzero"],
            "terms": {
                "r": [t.num_terms for t in self.terms.r],
                "r_prime": [t.num_terms for t in self.terms.r_prime],
                "u": self.terms.u.num_terms,
            },
        }

    def explain(self) -> str:
        """One line per sublayer of the block and the readout: index, kind, role, lemma, heads,
        reads -> writes."""
        rows = [
            f"{'#':>4}  {'kind':<15} {'role':<10} {'layer':>5}  {'lemma':<24} {'heads':>6} {'hidden':>6}  "
            "reads -> writes"
        ]

        def line(tag: str, info: SublayerInfo) -> str:
            lay = "" if info.layer is None else str(info.layer)
            return (
                f"{tag:>4}  {info.kind:<15} {info.role:<10} {lay:>5}  {info.lemma:<24} "
                f"{info.heads:>6} {info.hidden:>6}  "
                f"{', '.join(info.reads)} -> {', '.join(info.writes)}"
            )

        rows += [line(str(i + 1), m.info) for i, m in enumerate(self.block)]  # type: ignore[arg-type]
        rows.append(f"      (block applied L = {self.steps} times: {self.num_sublayers} sublayers); readout:")
        rows += [line(f"R{i + 1}", m.info) for i, m in enumerate(self.readout)]  # type: ignore[arg-type]
        return "\n".join(rows)


def build_prompt(
    layout: Layout,
    x: Tensor,
    y: Tensor,
    x_query: Tensor,
    w0: Tensor,
    *,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Build the GD-step prompt ``h_i = [x_i; y_i; w^(0); 0; 1; t_i]`` (paper-notes §1.1, §9.2).

    Args:
        layout: the token layout.
        x: ``(n, d_x)`` or ``(B, n, d_x)`` example inputs.
        y: ``(n, d_y)`` or ``(B, n, d_y)`` labels.
        x_query: ``(d_x,)`` or ``(B, d_x)`` query input.
        w0: ``(P,)`` or ``(B, P)`` initial weights, written into every token (any w^(0): the paper's
            w^(0) = 0 is a fixed point for bias-free ReLU networks, paper-notes §10.14).

    Returns:
        ``(B, n+1, D)``: the n examples (t = 1) then the query (t = 0, y = 0).
    """
    spec = layout.spec
    if x.dim() == 2:
        x, y, x_query = x[None], y[None], x_query[None]
    if w0.dim() == 1:
        w0 = w0[None].expand(x.shape[0], -1)
    B, n, dx = x.shape
    if dx != spec.in_dim or y.shape != (B, n, spec.out_dim) or x_query.shape != (B, dx):
        raise InputError(
            f"prompt shapes do not match the network: x {tuple(x.shape)}, y {tuple(y.shape)}, "
            f"x_query {tuple(x_query.shape)} (d_x={spec.in_dim}, d_y={spec.out_dim})"
        )
    if w0.shape != (B, spec.num_params):
        raise InputError(f"w0 must have {spec.num_params} entries per prompt, got shape {tuple(w0.shape)}")
    T = n + 1
    H = torch.zeros(B, T, layout.dim, dtype=dtype)
    H[:, :n, layout.indices("X")] = x.to(dtype)
    H[:, n, layout.indices("X")] = x_query.to(dtype)
    H[:, :n, layout.indices("Y")] = y.to(dtype)
    H[:, :, layout.indices("W")] = w0.to(dtype)[:, None, :]
    H[:, :, layout.index("ONE")] = 1.0
    H[:, :n, layout.index("T")] = 1.0
    return H


def sample_task(
    spec: NetSpec,
    n: int,
    *,
    seed: int = 0,
    loss: str = "squared",
    dtype: torch.dtype = torch.float64,
    w0_scale: float = 1.0,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """A random prompt for ``spec``: ``(x (n, d_x), y (n, d_y), x_query (d_x,), w0 (P,), w_teacher (P,))``.

    Drawn from ``seed`` in this order: a teacher network with He-scaled weights ``N(0, 2/fan_in)``; inputs
    ``x_1..x_n, x_query ~ N(0, I)``; ``w0`` like the teacher times ``w0_scale``. Labels ``y = f(w*, x)``; for
    the logistic loss ``y = ±1`` by the sign of ``f - median``. (The paper's ``w0 = 0`` is a fixed point for
    bias-free ReLU networks, so it is not the default.)
    """
    from icdl.nets import forward, init_weights

    g = torch.Generator().manual_seed(seed)
    w_star = init_weights(spec, generator=g, fan_in_scaling=True, dtype=torch.float64)
    x = torch.randn(n, spec.in_dim, generator=g, dtype=torch.float64)
    xq = torch.randn(spec.in_dim, generator=g, dtype=torch.float64)
    w0 = w0_scale * init_weights(spec, generator=g, fan_in_scaling=True, dtype=torch.float64)
    y = forward(spec, w_star, x)
    if loss == "logistic":
        y = torch.where(y >= y.median(dim=0).values, 1.0, -1.0).to(torch.float64)
    return tuple(v.to(dtype) for v in (x, y, xq, w0, w_star))  # type: ignore[return-value]


def compile_gd_transformer(
    spec: NetSpec,
    *,
    loss: str = "squared",
    lr: float = 0.1,
    steps: int = 1,
    n: int = 16,
    eps: float = 1e-3,
    radius: float = 10.0,
    delta: float | None = None,
    projection: str = "none",
    box: float | None = None,
    gate: float = 1e6,
    variant: str = "paper",
    dtype: str = "float64",
) -> CompiledModel:
    """Compile the transformer that runs ``steps`` projected-GD steps on ``spec`` over n-example prompts.

    ``projection="box"`` needs ``box`` (the bound B of ``W = {|w_c| <= B}``); ``"none"`` is plain GD.
    See :class:`GDConfig` for the other arguments.
    """
    if projection not in ("none", "box"):
        raise InputError(f"projection must be 'none' or 'box', got {projection!r}")
    if projection == "box" and box is None:
        raise InputError("projection 'box' needs a bound: pass box=B (--box B)")
    cfg = GDConfig(
        spec=spec,
        loss=loss,
        lr=lr,
        steps=steps,
        n=n,
        eps=eps,
        radius=radius,
        delta=delta,
        box=box if projection == "box" else None,
        gate=gate,
        variant=variant,
        dtype=dtype,
    )
    return compile_config(cfg)


def compile_config(cfg: GDConfig) -> CompiledModel:
    """Compile from a :class:`GDConfig`."""
    variant = get_variant(cfg.variant)
    layout = variant.layout(cfg.spec)
    terms = _fetch_terms(cfg)
    ctx = BuildContext(
        spec=cfg.spec,
        layout=layout,
        r=terms.r,
        r_prime=terms.r_prime,
        u=terms.u,
        lr=float(cfg.lr),
        n=cfg.n,
        gate=float(cfg.gate),
        box=cfg.box,
        dtype=cfg.torch_dtype,
    )
    return CompiledModel(cfg, layout, variant.block(ctx), variant.readout(ctx), terms)


def with_steps(model: CompiledModel, steps: int) -> CompiledModel:
    """The same compiled block applied ``steps`` times (no recompilation)."""
    cfg = replace(model.config, steps=steps)
    return CompiledModel(cfg, model.layout, list(model.block), list(model.readout), model.terms)
