"""Compile the GD transformer: a configuration in, a [`CompiledModel`][icdl.construct.compile.CompiledModel]
(an ``nn.Module``) out.

Usage:

```python
from icdl.nets import NetSpec, init_weights
from icdl.construct import compile_gd_transformer

spec = NetSpec(depth=3, width=8, in_dim=4, out_dim=2)
model = compile_gd_transformer(spec, lr=0.1, steps=5, n=16)        # (2N+4)*5 sublayers + readout
H = model.build_prompt(x, y, x_query, w0)                          # (B, n+1, D)
out = model(H)
model.read_weights(out)     # w^(5) — equal to 5 steps of reference GD
model.read_prediction(out)  # f(w^(5), x_query)
```

All L blocks are the same function: the block is built once and applied L times (Theorem 1's "L identical
blocks"). The weights depend on n through the (n+1)/(2n) factor of the update layer ((C.16), with the 1/T
normalisation of docs/construction.md), so the model records n and rejects prompts of another length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import Tensor, nn

from icdl import hooks
from icdl.construct.bounds.ranges import naming_auto_range, resolve_auto_range
from icdl.construct.build.context import BuildContext
from icdl.construct.build.prompt import build_prompt
from icdl.construct.config import GDConfig, PromptTensors, default_delta, default_tol
from icdl.construct.engine.kernels import Written, run_layers
from icdl.construct.engine.layers import Sublayer
from icdl.construct.engine.layout import Layout
from icdl.construct.engine.terms import SumTerms, Terms, activation_terms, loss_terms
from icdl.construct.task import SampledTask, sample_task, sample_task_info, task_is_degenerate
from icdl.construct.variants.registry import get_variant
from icdl.errors import InputError, reject_unknown_keywords
from icdl.nets import NetSpec
from icdl.sublayer import SublayerInfo

__all__ = [
    "CompiledModel",
    "GDConfig",
    "PromptTensors",
    "SampledTask",
    "SumTerms",
    "TraceFn",
    "TracePoint",
    "build_prompt",
    "compile_gd_transformer",
    "default_delta",
    "default_tol",
    "resolve_auto_range",
    "sample_task",
    "sample_task_info",
    "task_is_degenerate",
]


@dataclass(frozen=True)
class TracePoint:
    """Where a trace callback is called: after sublayer ``name`` of GD step ``step`` (0-based), or of the
    readout when ``step`` is None. ``index`` is the 0-based position in the block (or the readout)."""

    step: int | None
    index: int
    info: SublayerInfo
    # set when the sublayer ran in place (``CompiledModel.run(inplace=True)``): where it wrote, what was there
    written: Written | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def readout(self) -> bool:
        return self.step is None

    def describe(self) -> str:
        """``"step 2, sublayer 3 (forward_3)"`` or ``"readout, sublayer 4 (readout)"`` (1-based)."""
        where = "readout" if self.step is None else f"step {self.step + 1}"
        return f"{where}, sublayer {self.index + 1} ({self.name})"


# Called after every sublayer with its trace point and the state H (B, T, D); a tensor it returns
# replaces H for the rest of the pass (hooks, icdl.hooks).
TraceFn = Callable[[TracePoint, Tensor], "Tensor | None"]


def _fetch_terms(cfg: GDConfig) -> SumTerms:
    spec = cfg.spec
    delta = cfg.delta
    assert delta is not None
    cache: dict[tuple[str, bool], Terms] = {}

    def get(name: str, deriv: bool) -> Terms:
        if (name, deriv) not in cache:
            cache[(name, deriv)] = activation_terms(
                name, derivative=deriv, eps=cfg.eps, radius=cfg.radius, delta=delta
            )
        return cache[(name, deriv)]

    acts = [spec.layer_act(j).name for j in range(1, spec.depth + 1)]
    return SumTerms(
        r=tuple(get(a, False) for a in acts),
        r_prime=tuple(get(a, True) for a in acts),
        u=loss_terms(cfg.loss, eps=cfg.eps, radius=cfg.radius),
    )


class CompiledModel(nn.Module):
    """The compiled transformer: ``L`` applications of one block of sublayers, then the readout.

    Attributes:
        config: the [`GDConfig`][icdl.construct.config.GDConfig] it was compiled from.
        layout: the token layout.
        block: the sublayers of one GD step (``2N+4`` for the paper's variant), each with a typed ``.info``.
        readout: the readout sublayers (``N+1``).
        terms: the conditioned ReLU sums used (``r``, ``r_prime`` per layer; ``u``).
    """

    def __init__(
        self,
        config: GDConfig,
        layout: Layout,
        block: list[Sublayer],
        readout: list[Sublayer],
        terms: SumTerms,
    ) -> None:
        super().__init__()
        self.config = config
        self.layout = layout
        self.block = nn.ModuleList(block)
        self.readout = nn.ModuleList(readout)
        self.terms = terms
        # TransformerLens' cfg.use_attn_result: per-head ``hook_result`` points ((B, T, heads, D) each) are
        # computed only when asked for, since a sublayer may have thousands of heads.
        self.use_attn_result = False
        # Typed views of the two module lists (nn.ModuleList items are typed as nn.Module).
        self.block_layers: tuple[Sublayer, ...] = tuple(block)
        self.readout_layers: tuple[Sublayer, ...] = tuple(readout)
        for part in (self.block_layers, self.readout_layers):
            names = [m.info.name for m in part]
            if len(set(names)) != len(names):
                raise ValueError(f"sublayer names must be unique within a block or readout: {names}")

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
        """The block's sublayer descriptions, in application order."""
        return [m.info for m in self.block_layers]

    def readout_infos(self) -> list[SublayerInfo]:
        return [m.info for m in self.readout_layers]

    @property
    def max_heads(self) -> int:
        return max(m.info.heads for m in (*self.block_layers, *self.readout_layers))

    def parameter_counts(self) -> dict[str, int]:
        """Coefficient counts (index tables excluded).

        * ``stored``: compact coefficients of all ``(2N+4)L`` + readout sublayers, counting each of the L
          applications of the block as its own layer (as the paper's (2N+4)L-layer model would);
        * ``unique``: the same with the shared block counted once (what the model holds and saves);
        * ``dense``: the paper's dense form (``Q_m, K_m, V_m in R^{D x D}`` per head; ``W_1, W_2`` per MLP);
        * ``nonzero``: non-zero entries of the dense form, all sublayers counted.
        """
        L = self.steps

        B, R = self.block_layers, self.readout_layers
        stored_b = sum(m.stored_coefficients() for m in B)
        stored_r = sum(m.stored_coefficients() for m in R)
        return {
            "stored": L * stored_b + stored_r,
            "unique": stored_b + stored_r,
            "dense": L * sum(m.dense_parameters() for m in B) + sum(m.dense_parameters() for m in R),
            "nonzero": L * sum(m.nonzero_coefficients() for m in B)
            + sum(m.nonzero_coefficients() for m in R),
        }

    # -- prompts --------------------------------------------------------------------------------------
    def build_prompt(self, x: Tensor, y: Tensor, x_query: Tensor, w0: Tensor) -> Tensor:
        """See [`build_prompt`][icdl.construct.compile.build_prompt]; checks that the prompt has this model's
        n."""
        if x.shape[-2] != self.n:
            raise InputError(f"the model was compiled for n={self.n} examples; got {x.shape[-2]}")
        return build_prompt(self.layout, x, y, x_query, w0, dtype=self.config.torch_dtype)

    def check_prompt(self, H: Tensor) -> None:
        """Raise [`InputError`][icdl.errors.InputError] unless ``H`` is ``(B, n+1, D)`` for this model."""
        if H.dim() != 3 or H.shape[-1] != self.layout.dim:
            T = self.layout.prefix_tokens + self.n + 1
            raise InputError(f"expected a prompt of shape (B, {T}, {self.layout.dim}), got {tuple(H.shape)}")
        if H.shape[1] != self.layout.prefix_tokens + self.n + 1:
            raise InputError(
                f"the model was compiled for n={self.n} examples "
                f"({self.layout.prefix_tokens + self.n + 1} tokens): "
                "its update weights carry "
                f"the factor (n+1)/(2n); the prompt has {H.shape[1]} tokens"
            )

    def read_weights(self, H: Tensor, token: int = -1) -> Tensor:
        """The weights w, shape ``(B, P)``: the W slot of one token (default: the query) in the paper's
        layout, the row tokens in a layout that keeps w there
        ([`Layout.read_weights`][icdl.construct.engine.layout.Layout.read_weights])."""
        return self.layout.read_weights(H, token)

    def read_prediction(self, H: Tensor) -> Tensor:
        """The query token's Y slot, shape ``(B, d_y)``: ``f(w^(L), x_query)`` after the readout."""
        return H[:, -1, self.layout.indices("Y")]

    # -- running ----------------------------------------------------------------------------------------
    def run(
        self,
        H: Tensor,
        trace: TraceFn | None = None,
        readout: bool = True,
        *,
        reuse: bool | None = None,
        inplace: bool | None = None,
        grad: bool | None = None,
    ) -> Tensor:
        """Apply the L blocks (and the readout), calling ``trace(point, H)`` after each sublayer
        ([`TracePoint`][icdl.construct.compile.TracePoint]: 0-based step, or None for the readout).
        ``grad`` (default: ``H.requires_grad`` where autograd is enabled) runs with autograd, so the output
        can be differentiated with respect to ``H`` (gradient attribution, integrated gradients,
        ``backward()``; the tables are buffers, not parameters); it implies ``reuse=False`` and
        ``inplace=False``. Without it the run records no graph (the default for a plain tensor prompt).
        ``reuse`` (default: without ``trace``) writes the states into two buffers in turn, the same values
        without a fresh state per sublayer: a traced state lives until the sublayer after next returns.
        ``inplace`` (default: ``reuse`` without ``trace``) runs the sublayers that are additions at fixed
        places ([`Sublayer.delta`][icdl.construct.engine.sublayers.Sublayer.delta]) in the state itself, the
        same values again: ``point.written`` says where they wrote and what was there, and a traced state
        lives until the next sublayer. ``H`` is never written."""
        grad = H.requires_grad and torch.is_grad_enabled() if grad is None else grad
        if grad and (reuse or inplace):
            raise InputError("grad=True needs fresh states: leave reuse and inplace unset (or False)")
        reuse = trace is None and not grad if reuse is None else reuse
        inplace = reuse and trace is None if inplace is None else inplace
        self.check_prompt(H)
        parts: list[tuple[int | None, tuple[Sublayer, ...]]] = [
            (s, self.block_layers) for s in range(self.steps)
        ]
        parts += [(None, self.readout_layers)] if readout else []
        traced = None if trace is None else (lambda l, i, m, w, S: trace(TracePoint(l, i, m.info, w), S))
        return run_layers(parts, H, traced, reuse=reuse, inplace=inplace, grad=grad)

    def forward(self, H: Tensor) -> Tensor:
        return self.run(H)

    # -- hooks (TransformerLens conventions, icdl.hooks) --------------------------------------------------
    def hook_names(self, readout: bool = True) -> list[str]:
        """``hook_prompt``, then per sublayer of step l (0-based) ``steps.{l}.{sublayer}.hook_write`` (what it
        writes) and ``.hook_out`` (the stream after it), ``.hook_result`` first for head sublayers when
        ``use_attn_result`` is set; the same under ``readout.{sublayer}`` ([`icdl.hooks`][icdl.hooks])."""
        return hooks.compiled_hook_names(self, readout)

    def run_with_cache(
        self,
        H: Tensor,
        names_filter: hooks.NamesFilter = None,
        *,
        readout: bool = True,
        grad: bool | None = None,
    ) -> tuple[Tensor, hooks.ActivationCache]:
        """``(self.run(H), cache)``: the residual stream at every hook point ``names_filter`` picks
        (None, a name, a list of names or a predicate; ``steps.-1.`` counts from the end); the cache holds
        detached copies, ``grad`` is [`run`][icdl.construct.compile.CompiledModel.run]'s."""
        return hooks.compiled_run_with_cache(self, H, names_filter, readout=readout, grad=grad)

    def run_with_hooks(
        self, H: Tensor, fwd_hooks: hooks.FwdHooks, *, readout: bool = True, grad: bool | None = None
    ) -> Tensor:
        """``self.run(H)`` with interventions: ``fn(stream, hook)`` returns the stream the next sublayer
        reads, or None to keep it (edited in place); with ``grad`` (see
        [`run`][icdl.construct.compile.CompiledModel.run]) the streams a hook sees are in the graph."""
        return hooks.compiled_run_with_hooks(self, H, fwd_hooks, readout=readout, grad=grad)

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

    def explain_rows(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per sublayer: ``index`` (1-based; ``"R1"``.. for the readout) + its info."""
        return [{"index": i + 1, **info.to_dict()} for i, info in enumerate(self.infos())] + [
            {"index": f"R{i + 1}", **info.to_dict()} for i, info in enumerate(self.readout_infos())
        ]

    def explain(self) -> str:
        """One line per sublayer of the block and the readout: index, name, kind, lemma, heads, hidden,
        reads -> writes."""
        rows = [
            f"{'#':>4}  {'name':<20} {'kind':<17} {'lemma':<30} {'heads':>6} {'hidden':>6}  reads -> writes"
        ]

        def line(tag: str, i: SublayerInfo) -> str:
            io = f"{', '.join(i.reads)} -> {', '.join(i.writes)}"
            return f"{tag:>4}  {i.name:<20} {i.kind:<17} {i.lemma:<30} {i.heads:>6} {i.hidden:>6}  {io}"

        rows += [line(str(i + 1), info) for i, info in enumerate(self.infos())]
        rows.append(f"      (block applied L = {self.steps} times: {self.num_sublayers} sublayers); readout:")
        rows += [line(f"R{i + 1}", info) for i, info in enumerate(self.readout_infos())]
        return "\n".join(rows)


def compile_gd_transformer(
    config: GDConfig | NetSpec,
    *,
    loss: str = "squared",
    lr: float = 0.1,
    steps: int = 1,
    n: int = 16,
    eps: float = 1e-3,
    radius: float | str = 10.0,
    delta: float | None = None,
    projection: str = "none",
    box: float | None = None,
    gate: float = 1e6,
    variant: str = "paper",
    dtype: str = "float64",
    prompt: PromptTensors | None = None,
    **unknown: Any,
) -> CompiledModel:
    """Compile the transformer that runs ``steps`` projected-GD steps over n-example prompts (Theorem 1:
    L identical blocks, each one GD step).

    Pass a [`GDConfig`][icdl.construct.config.GDConfig] alone, or a [`NetSpec`][icdl.nets.NetSpec] and
    keyword options (their meaning and defaults are those of [`GDConfig`][icdl.construct.config.GDConfig];
    ``projection``/``box`` and ``radius="auto"`` with ``prompt`` are resolved by
    [`GDConfig.create`][icdl.construct.config.GDConfig.create]):

    ```python
    compile_gd_transformer(spec, steps=5, n=16, projection="box", box=0.5)
    compile_gd_transformer(spec, steps=5, n=16, radius="auto", prompt=(x, y, x_query, w0))
    ```

    Args:
        config: the network to run GD on, or a complete configuration (then pass no option).
        loss: loss name (``icdl.nets.LOSSES``).
        lr: GD step size eta.
        steps: L, the number of GD steps (blocks).
        n: number of in-context examples (prompts have n + 1 tokens).
        eps: target sup error of every fitted ReLU sum (ignored where sums are exact).
        radius: range ``[-R, R]`` of the fitted sums, or ``"auto"`` (needs ``prompt``): from a-priori
            bounds along the GD trajectory on that prompt.
        delta: relu' step window (None: [`default_delta`][icdl.construct.config.default_delta]).
        projection: ``"none"`` (plain GD) or ``"box"`` (projected GD onto ``{|w_c| <= box}``).
        box: the box bound B (only with ``projection="box"``).
        gate: constant C of the query gate (Lemma 4) and readout.
        variant: construction name (``icdl variants`` lists them).
        dtype: ``"float64"`` (verification) or ``"float32"``.
        prompt: ``(x, y, x_query, w0)``, only with ``radius="auto"``.
        **unknown: any other keyword is rejected with an
            [`InputError`][icdl.errors.InputError] naming the closest option (``step`` -> ``steps``).

    Raises:
        InputError: an unknown keyword, options next to a `GDConfig`, or an invalid option value.
    """
    options: dict[str, Any] = dict(
        loss=loss, lr=lr, steps=steps, n=n, eps=eps, radius=radius, delta=delta, projection=projection,
        box=box, gate=gate, variant=variant, dtype=dtype, prompt=prompt,
    )  # fmt: skip
    reject_unknown_keywords(unknown, options, "compile_gd_transformer")
    if isinstance(config, GDConfig):
        given = [k for k, v in options.items() if v is not _OPTION_DEFAULTS[k] and v != _OPTION_DEFAULTS[k]]
        if given:
            raise InputError(
                f"pass either a GDConfig or a NetSpec with options, not both (got {', '.join(given)})"
            )
        cfg = config
    else:
        cfg = GDConfig.create(config, **options)
    variant_ = get_variant(cfg.variant)
    layout = variant_.layout(cfg.spec)
    with naming_auto_range(cfg):  # a fitter's refusal on a range the user did not type names --range auto
        ctx = BuildContext(cfg, layout, terms := _fetch_terms(cfg))
        return CompiledModel(cfg, layout, variant_.block(ctx), variant_.readout(ctx), terms)


# The keyword defaults of compile_gd_transformer: GDConfig's field defaults (a test keeps them equal).
_OPTION_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(GDConfig) if f.name != "spec"}
_OPTION_DEFAULTS.update(projection="none", prompt=None)


def with_steps(model: CompiledModel, steps: int) -> CompiledModel:
    """The same compiled block applied ``steps`` times (no recompilation)."""
    cfg = replace(model.config, steps=steps)
    return CompiledModel(cfg, model.layout, list(model.block_layers), list(model.readout_layers), model.terms)
