"""Export icdl models to TransformerLens (the optional extra ``icdl[interp]``, ``transformer-lens>=4.3``).

TransformerLens 4 replaced ``HookedTransformer`` with ``TransformerBridge``, which also wraps a config-driven
*native* architecture: pre-norm blocks ``h + attn(ln1(h))``, ``h + mlp(ln2(h))`` with LayerNorm or no norm,
causal or bidirectional softmax attention with biases, an MLP with a chosen activation, an unembedding without
bias. [`to_transformer_lens`][icdl.export.to_transformer_lens] builds one (no download) and copies an icdl
model's weights into it, so every TransformerLens tool (``run_with_cache``, ``run_with_hooks``, activation
patching, attribution) runs on it. The prompt enters as the residual stream in front of block 0
(``start_at_layer=0``), since neither model kind reads token ids.

Two model kinds:

* the trained ICL transformer ([`ICLTransformer`][icdl.icl.models.ICLTransformer]) with
  ``attention: softmax``: the same pre-LN GPT-2 blocks (LayerNorm eps 1e-5, causal attention with scale
  ``sqrt(d_head)``, GELU(tanh) MLP), the final LayerNorm, and the read-out as the unembedding. The
  residual input is the read-in plus the position (or token-type) embedding; ``logits[:, 0::2]`` (the
  x tokens) are the predictions. Dropout is not exported (the bridge is the model in eval mode).
* a compiled ``--variant softmax`` model ([`CompiledModel`][icdl.construct.compile.CompiledModel]): one
  TransformerLens block per sublayer, in application order (the L GD steps, then the readout), with no norm
  and bidirectional attention. A ReLU MLP (Definition 8) becomes a block whose attention is zero; a
  softmax-attention sublayer (eq. (E.1), ``W^(O)`` folded into V) a block whose MLP is zero. Head counts,
  head widths and MLP widths are padded with zeros to the largest sublayer's. Each head's value entry
  ``(source, coefficient, destination)`` gets its own value channel (``coefficient * h[source]``), which
  ``W_O`` writes to its destination. The unembedding is the identity: the logits are the final residual
  stream, and ``read_prediction`` of them is the prediction.

Precision of a compiled export: TransformerLens multiplies dense matrices, where icdl adds each unit's reads
in an order chosen for exact cancellation. Two parts of the construction notice. The query gate
``-C (1 - T)`` of the loss and readout MLPs (Lemma 4) shares one dense weight with the unit's bias, which
costs ``ulp(C)`` (C = 1e6: 0.06 in float32, 1.2e-10 in float64; any C above every ``|u|`` and ``|p(N)|``
works, e.g. ``gate=64``). For ReLU networks, ``r'`` is a step of width ``delta``: a pre-activation that is
exactly 0 in icdl (a dead unit) is round-off in the export, multiplied by ``1/delta`` (1e-17 / 1e-9 = 1e-8 at
float64's default delta). With ``gate=64`` and ``delta=1e-6`` (float64) or ``1e-2`` (float32) the export
agrees to 1e-10 and 1e-5 (tests/test_export.py).

What TransformerLens cannot express is refused with an [`InputError`][icdl.errors.InputError]: ReLU
attention (the ``paper``, ``compact``, ``no-ewml`` and ``rows`` variants, and ICL models trained with
``attention: relu``), EWML sublayers (Definition 6: a token times itself), MLPs restricted to some tokens
and the row tokens of ``--variant rows``.

Usage:

```python
from icdl.export import to_transformer_lens

tl = to_transformer_lens(model)                        # model: CompiledModel (softmax) or ICLTransformer
resid = tl.residual_input(x, y, x_query, w0)           # the prompt H (ICL: tl.residual_input(xs, ys))
logits, cache = tl.run_with_cache(resid)              # = tl.bridge.run_with_cache(resid, start_at_layer=0)
tl.predictions(logits)                                 # = model's prediction
cache[tl.hook_name("steps.0.update.hook_out")]         # icdl hook name -> TransformerLens hook name
```
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from icdl import hooks
from icdl.construct.compile import CompiledModel
from icdl.construct.engine.layers import ReLUMLP, SoftmaxAttention
from icdl.construct.engine.sublayers import Sublayer
from icdl.errors import InputError
from icdl.hooks import PROMPT, resolve_name
from icdl.icl.models import ICLTransformer, hook_name
from icdl.inspect.ledger import ledger

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["MAX_DENSE_ENTRIES", "TransformerLensModel", "to_hooked", "to_transformer_lens"]

MAX_DENSE_ENTRIES = 200_000_000
"""Largest exported model (weight entries, all blocks) before export refuses: TransformerLens stores every
block's weights densely, where icdl stores sparse tables and one shared GD block."""

# Compiled attention: scores are <Q h_i, K h_s> with no scale (eq. (E.1)); TransformerLens divides by
# attn_scale, so W_Q is multiplied by it. A power of two keeps both operations exact.
_COMPILED_ATTN_SCALE = 2.0

_REFUSE_HINT = (
    "compile with --variant softmax (compile_gd_transformer(..., variant='softmax')), or use "
    "icdl.export.to_hooked(model) for TransformerLens' hooks on any variant"
)


class TransformerLensModel:
    """An icdl model as a TransformerLens ``TransformerBridge``, with the glue between the two.

    Attributes:
        bridge: the ``TransformerBridge`` (native architecture); run it on
            [`residual_input`][icdl.export.TransformerLensModel.residual_input] with ``start_at_layer=0``.
        source: the icdl model it was exported from (not copied).
        block_names: for each TransformerLens block, the icdl hook point after it (``steps.{l}.{sublayer}``
            for a compiled model, ``blocks.{i}`` for an ICL model).
    """

    def __init__(self, bridge: TransformerBridge, source: nn.Module, block_names: Sequence[str]) -> None:
        self.bridge = bridge.eval()  # no dropout is exported; TL's logit_lens and patching want eval mode
        self.source = source
        self.block_names = tuple(block_names)

    @property
    def ledger(self) -> dict[str, Any] | None:
        """A compiled source's ground-truth ledger ([`icdl.inspect.ledger`][icdl.inspect.ledger]; its hook
        names map to the bridge's with [`hook_name`][icdl.export.TransformerLensModel.hook_name]); None for
        an ICL model."""
        return ledger(self.source) if isinstance(self.source, CompiledModel) else None

    def forward(self, resid: Tensor, **kwargs: Any) -> Tensor:
        """The bridge's logits on the residual stream ``resid`` (from
        [`residual_input`][icdl.export.TransformerLensModel.residual_input]): ``bridge(resid,
        start_at_layer=0, **kwargs)``."""
        return self.bridge(resid, **{"start_at_layer": 0, **kwargs})

    def run_with_cache(self, resid: Tensor, *args: Any, **kwargs: Any) -> Any:
        """``bridge.run_with_cache(resid, *args, start_at_layer=0, **kwargs)``: ``(logits, cache)`` with
        TransformerLens' ``ActivationCache`` (``cache["pattern", 0]``, ``accumulated_resid``, ...)."""
        return self.bridge.run_with_cache(resid, *args, **{"start_at_layer": 0, **kwargs})

    def run_with_hooks(self, resid: Tensor, *args: Any, **kwargs: Any) -> Any:
        """``bridge.run_with_hooks(resid, *args, start_at_layer=0, **kwargs)``: the logits with
        TransformerLens ``fwd_hooks`` / ``bwd_hooks`` applied."""
        return self.bridge.run_with_hooks(resid, *args, **{"start_at_layer": 0, **kwargs})

    def patching_index(self, resid: Tensor, axes: Sequence[str] = ("layer", "pos")) -> Any:
        """The ``index_df`` (a pandas DataFrame, every combination of ``axes``) that
        ``transformer_lens.patching.generic_activation_patch(tl, corrupted_resid, clean_cache, metric,
        patch_setter, activation_name, index_df=...)`` needs on a residual input. TransformerLens' prebuilt
        ``get_act_patch_*`` infer the position axis from ``tokens.shape[-1]``, which for the residual input
        ``(B, T, d_model)`` is ``d_model`` (an ``IndexError``); here ``pos`` is ``T``. Axes: ``layer``,
        ``pos``, ``head_index``/``head``, ``src_pos``/``dest_pos``."""
        import itertools

        import pandas as pd

        cfg = self.bridge.cfg
        size = {"layer": cfg.n_layers, "pos": resid.shape[1], "src_pos": resid.shape[1],
                "dest_pos": resid.shape[1], "head_index": cfg.n_heads, "head": cfg.n_heads}  # fmt: skip
        unknown = [a for a in axes if a not in size]
        if unknown:
            raise InputError(f"unknown patching axes {unknown}; choose from {', '.join(size)}")
        return pd.DataFrame(list(itertools.product(*(range(size[a]) for a in axes))), columns=list(axes))

    def __getattr__(self, name: str) -> Any:
        """Every other attribute is the bridge's (``hooks()``, ``add_hook``, ``reset_hooks``, ``cfg``,
        ``blocks``, ...)."""
        if name in ("bridge", "source", "block_names") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.bridge, name)

    def residual_input(self, *prompt: Tensor) -> Tensor:
        """The residual stream entering block 0, shape ``(B, T, d_model)``, in the bridge's dtype.

        Compiled model: ``residual_input(x, y, x_query, w0)`` is
        [`build_prompt`][icdl.construct.compile.CompiledModel.build_prompt] (a prompt ``H`` may also be passed
        as it is). ICL model: ``residual_input(xs, ys)`` is the read-in of the interleaved tokens plus the
        position (or token-type) embedding, as in ``ICLTransformer.forward``.
        """
        dtype = next(self.bridge.parameters()).dtype
        if isinstance(self.source, CompiledModel):
            H = prompt[0] if len(prompt) == 1 else self.source.build_prompt(*prompt)
            self.source.check_prompt(H)
            return H.to(dtype)
        assert isinstance(self.source, ICLTransformer)
        xs, ys = prompt
        src = self.source
        n = xs.shape[1]
        if n > src.max_points:
            raise InputError(f"prompt has {n} points, the model supports at most {src.max_points}")
        with torch.no_grad():
            tok = src.tokens(xs.to(src.read_in.weight.dtype), ys.to(src.read_in.weight.dtype))
            if src.wpe is not None:
                where = src.wpe(torch.arange(2 * n, device=xs.device))
            else:
                assert src.wtype is not None
                where = src.wtype.weight.repeat(n, 1)
            return (src.read_in(tok) + where).to(dtype)

    def predictions(self, logits: Tensor) -> Tensor:
        """The icdl model's output from the bridge's logits: the query's Y slot ``(B, d_y)`` of a compiled
        model (its logits are the final residual stream), the x tokens' logits ``(B, n, d_y)`` of an ICL
        model."""
        if isinstance(self.source, CompiledModel):
            return self.source.read_prediction(logits)
        return logits[:, 0::2]

    def __call__(self, *prompt: Tensor) -> Tensor:
        """``predictions(bridge(residual_input(*prompt), start_at_layer=0))``."""
        with torch.no_grad():
            return self.predictions(self.bridge(self.residual_input(*prompt), start_at_layer=0))

    def _write_name(self, name: str, block: int) -> str:
        """``blocks.{block}.hook_attn_out`` or ``hook_mlp_out``: what the block adds, which is the sublayer's
        ``hook_write`` unless the sublayer rewrites coordinates (there ``hook_write`` holds the new value)."""
        src = self.source
        assert isinstance(src, CompiledModel)
        m = {
            m.info.name: m for m in (src.readout_layers if name.startswith("readout.") else src.block_layers)
        }[name.split(".")[-2]]
        if m.rewritten_coords().numel():
            raise InputError(
                f"{name!r} has no TransformerLens counterpart: the sublayer rewrites coordinates, where "
                "hook_write holds the new value and the bridge's block output the difference"
            )
        return f"blocks.{block}.{'hook_attn_out' if isinstance(m, SoftmaxAttention) else 'hook_mlp_out'}"

    def hook_name(self, name: str) -> str:
        """The TransformerLens hook name of an icdl hook point.

        Compiled model: ``hook_prompt`` -> ``blocks.0.hook_resid_pre``, ``steps.{l}.{sublayer}.hook_out`` and
        ``readout.{sublayer}.hook_out`` (negative ``l`` counts from the end) -> ``blocks.{i}.hook_resid_post``
        of the block that computes that sublayer; ``.hook_write`` -> ``blocks.{i}.hook_attn_out`` or
        ``hook_mlp_out`` (refused for a sublayer that rewrites coordinates). ICL model: the names are
        TransformerLens' already (``blocks.{i}.hook_resid_post``, ``blocks.{i}.attn.hook_z``; a negative
        ``i`` is resolved), except
        ``blocks.{i}.hook_ln1``/``hook_ln2`` -> ``blocks.{i}.ln1.hook_out``/``ln2.hook_out``. The bridge has
        no ``attn.hook_result``, and its ``attn.hook_attn_scores`` (TransformerLens 4.3, native architecture)
        holds the pattern, not the scores: both are refused here.
        """
        if isinstance(self.source, CompiledModel):
            full = resolve_name(name, {"steps": self.source.steps})
            if full == PROMPT:
                return "blocks.0.hook_resid_pre"
            stem = full.removesuffix(".hook_out").removesuffix(".hook_write")
            if full == stem or stem not in self.block_names:
                raise InputError(f"no hook point {name!r}; see the source model's hook_names()")
            i = self.block_names.index(stem)
            if full.endswith(".hook_out"):
                return f"blocks.{i}.hook_resid_post"
            return self._write_name(full, i)
        full = resolve_name(name, {"blocks": len(self.block_names)})
        if full.endswith((".attn.hook_result", ".attn.hook_attn_scores")):
            raise InputError(
                f"{name!r} has no counterpart in the TransformerLens bridge (it has no per-head result, and "
                "its attn.hook_attn_scores holds the pattern); compare attn.hook_z or attn.hook_pattern"
            )
        for ln in ("ln1", "ln2"):
            if full.endswith(f".hook_{ln}"):
                return full.removesuffix(f"hook_{ln}") + f"{ln}.hook_out"
        return full


def _boot(config: dict[str, Any], dtype: torch.dtype) -> TransformerBridge:
    try:
        from transformer_lens.model_bridge.sources.native import boot
    except ImportError as e:
        raise InputError(
            "exporting to TransformerLens needs transformer-lens>=4.3: pip install 'icdl[interp]'"
        ) from e
    # init_weights False: every weight is written below; seed None keeps the caller's RNG untouched.
    return boot({**config, "init_weights": False, "dtype": dtype}, dtype=dtype)


def _native(bridge: TransformerBridge) -> Any:
    """The bridge's ``NativeModel`` (its modules are the ones the bridge runs)."""
    return bridge.original_model


def to_transformer_lens(model: nn.Module, *, dtype: torch.dtype | None = None) -> TransformerLensModel:
    """Export an ICL transformer with softmax attention, or a compiled ``--variant softmax`` model, to a
    TransformerLens ``TransformerBridge`` that computes the same function (see the module docstring).

    Args:
        model: an [`ICLTransformer`][icdl.icl.models.ICLTransformer] or a
            [`CompiledModel`][icdl.construct.compile.CompiledModel].
        dtype: the bridge's dtype (default: the model's: its config's for a compiled model, its parameters'
            for an ICL model).

    Raises:
        InputError: the model has parts TransformerLens cannot express (ReLU attention, EWML, token-restricted
            MLPs, row tokens), is too large (``MAX_DENSE_ENTRIES``), or transformer-lens is missing.
    """
    if isinstance(model, CompiledModel):
        return _export_compiled(model, dtype or model.config.torch_dtype)
    if isinstance(model, ICLTransformer):
        return _export_icl(model, dtype or model.read_in.weight.dtype)
    raise InputError(
        f"cannot export a {type(model).__name__}: "
        "to_transformer_lens takes an ICLTransformer or a CompiledModel"
    )


# -- the trained ICL transformer ----------------------------------------------------------------------


def _export_icl(model: ICLTransformer, dtype: torch.dtype) -> TransformerLensModel:
    """GPT-2 blocks map one to one: fused qkv split into q, k, v; ``proj`` is ``W_O``; ``fc``/``proj`` of the
    MLP are ``fc_in``/``fc_out``; ``ln_f`` the final norm; ``read_out`` the unembedding (its bias added to
    TransformerLens' bias-free head)."""
    cfg = model.config
    if cfg.attention != "softmax":
        raise InputError(
            f"TransformerLens cannot express this ICL model: its attention is {cfg.attention!r} and "
            "TransformerLens' attention is softmax only; train with model.attention: softmax, or use "
            "icdl.export.to_hooked(model) for TransformerLens' hooks"
        )
    if model.loops is not None:
        raise InputError(
            "TransformerLens cannot express a looped ICL model: its passes re-add the embedded prompt "
            "(input injection), which TransformerLens' blocks have no place for; use "
            "icdl.export.to_hooked(model) or the model's own run_with_cache / run_with_hooks"
        )
    heads, d_model = cfg.heads, cfg.d_model
    d_head = d_model // heads
    bridge = _boot(
        {
            "d_model": d_model,
            "d_head": d_head,
            "n_heads": heads,
            "n_layers": cfg.layers,
            "n_ctx": 2 * model.max_points,
            "d_vocab": 1,
            "d_vocab_out": model.d_y,
            "d_mlp": cfg.d_mlp,
            "act_fn": "gelu_new",
            "normalization_type": "LN",
            "eps": model.ln_f.eps,
            "attention_dir": "causal",
            "positional_embedding_type": "standard",
            "attn_scale": math.sqrt(d_head),
        },
        dtype,
    )
    native = _native(bridge)
    with torch.no_grad():
        native.pos.weight.zero_()  # the residual input carries the positions (start_at_layer=0)
        for blk, src in zip(native.layers, model.blocks, strict=True):
            _load_icl_block(blk, src)
        _copy_ln(native.ln_out, model.ln_f)
        native.head.weight.copy_(model.read_out.weight)
        # The native head has no bias; nn.Linear adds one once it is registered (the read-out's b).
        native.head.bias = nn.Parameter(model.read_out.bias.detach().to(dtype).clone())
    return TransformerLensModel(bridge, model, [f"blocks.{i}" for i in range(cfg.layers)])


def _load_icl_block(blk: Any, src: Any) -> None:
    """One GPT-2 block (``icdl.icl.models.Block``) into a native block."""
    _copy_ln(blk.ln1, src.ln1)
    _copy_ln(blk.ln2, src.ln2)
    w, b = src.attn.qkv.weight.chunk(3), src.attn.qkv.bias.chunk(3)  # q, k, v: heads side by side
    for lin, wi, bi in zip((blk.attn.q, blk.attn.k, blk.attn.v), w, b, strict=True):
        _copy_linear(lin, wi, bi)
    _copy_linear(blk.attn.o, src.attn.proj.weight, src.attn.proj.bias)
    _copy_linear(blk.mlp.fc_in, src.mlp.fc.weight, src.mlp.fc.bias)
    _copy_linear(blk.mlp.fc_out, src.mlp.proj.weight, src.mlp.proj.bias)


def _copy_ln(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def _copy_linear(dst: nn.Linear, weight: Tensor, bias: Tensor | None) -> None:
    dst.weight.copy_(weight)
    if dst.bias is not None:
        dst.bias.copy_(bias if bias is not None else torch.zeros_like(dst.bias))


# -- compiled models ------------------------------------------------------------------------------------


def _check_compiled(model: CompiledModel) -> list[tuple[str, Sublayer]]:
    """The sublayers in application order, named by their icdl hook point; refuses what TransformerLens
    cannot express."""
    variant = model.config.variant
    if model.layout.prefix_tokens:
        raise InputError(
            f"TransformerLens cannot express --variant {variant}: its row tokens are updated by "
            "token-restricted sublayers, and TransformerLens' blocks act on every token alike; "
            + _REFUSE_HINT
        )
    out = [(f"steps.{l}.{m.info.name}", m) for l in range(model.steps) for m in model.block_layers]
    out += [(f"readout.{m.info.name}", m) for m in model.readout_layers]
    for name, m in out:
        kind = m.info.kind
        if type(m) not in (ReLUMLP, SoftmaxAttention):
            why = {
                "relu_attention": "TransformerLens' attention is softmax only",
                "ewml": "an EWML head (Definition 6) multiplies a token by itself, which no TransformerLens "
                "block computes",
            }.get(kind, f"its {type(m).__name__} acts on some tokens only")
            raise InputError(
                f"TransformerLens cannot express --variant {variant}: sublayer {name} is {kind} ({why}); "
                f"{_REFUSE_HINT}"
            )
    return out


def _export_compiled(model: CompiledModel, dtype: torch.dtype) -> TransformerLensModel:
    named = _check_compiled(model)
    attns = [m for _, m in named if isinstance(m, SoftmaxAttention)]
    mlps = [m for _, m in named if isinstance(m, ReLUMLP)]
    D = model.embedding_dim
    heads = max((m.num_heads for m in attns), default=1)
    d_head = max((max(m.head_dim, m.v_src.shape[1]) for m in attns), default=1)
    d_mlp = max((m.hidden for m in mlps), default=1)
    entries = len(named) * (2 * D * d_mlp + 4 * heads * d_head * D)
    if entries > MAX_DENSE_ENTRIES:
        raise InputError(
            f"the exported model would hold {entries:.2e} dense weights (> {MAX_DENSE_ENTRIES:.0e}): "
            "TransformerLens stores every block densely; compile fewer steps or a smaller network"
        )
    bridge = _boot(
        {
            "d_model": D,
            "d_head": d_head,
            "n_heads": heads,
            "n_layers": len(named),
            "n_ctx": model.n + 1,
            "d_vocab": 1,
            "d_vocab_out": D,
            "d_mlp": d_mlp,
            "act_fn": "relu",
            "normalization_type": None,
            "attention_dir": "bidirectional",
            "positional_embedding_type": "standard",
            "attn_scale": _COMPILED_ATTN_SCALE,
        },
        dtype,
    )
    native = _native(bridge)
    with torch.no_grad():
        for p in native.parameters():
            p.zero_()
        for blk, (_, m) in zip(native.layers, named, strict=True):  # blk: a NativeBlock
            if isinstance(m, SoftmaxAttention):
                _load_heads(blk.attn, m, d_head)
            else:
                W1, W2 = m.dense()  # (U, D), (D, U)
                blk.mlp.fc_in.weight[: m.hidden].copy_(W1)
                blk.mlp.fc_out.weight[:, : m.hidden].copy_(W2)
        native.head.weight.copy_(torch.eye(D))  # logits = the final residual stream
    return TransformerLensModel(bridge, model, [name for name, _ in named])


def _load_heads(attn: Any, m: SoftmaxAttention, d_head: int) -> None:
    """Head h of ``m`` into rows ``h*d_head ...`` of ``W_Q``, ``W_K``, ``W_V`` and columns of ``W_O``: value
    channel e of head h reads ``coef_e * h[src_e]`` and ``W_O`` writes it to ``dst_e``."""
    for h in range(m.num_heads):
        Q, K, _ = m.dense_head(h)  # (dh, D) each
        rows = slice(h * d_head, h * d_head + m.head_dim)
        attn.q.weight[rows].copy_(Q * _COMPILED_ATTN_SCALE)
        attn.k.weight[rows].copy_(K)
        for e, (src, dst, coef) in enumerate(
            zip(m.v_src[h].tolist(), m.v_dst[h].tolist(), m.v_coef[h].tolist(), strict=True)
        ):
            if coef == 0.0:
                continue  # padding entry
            attn.v.weight[h * d_head + e, src] = coef
            attn.o.weight[dst, h * d_head + e] = 1.0


# -- every variant: icdl's own computation under TransformerLens' hook machinery -----------------------------


def _hooked_root_module() -> Any:
    try:
        from transformer_lens import HookedRootModule
        from transformer_lens.hook_points import HookPoint
    except ImportError as e:
        raise InputError("to_hooked needs transformer-lens>=4.3: pip install 'icdl[interp]'") from e
    return HookedRootModule, HookPoint


def _point_tree(names: Sequence[str], HookPoint: Any) -> nn.Module:
    """Modules nested so that each dotted ``name`` is a ``HookPoint``'s module path (``blocks.0.attn.hook_q``,
    ``steps.1.update.hook_out``); numeric parts become ``nn.ModuleList`` entries' string keys."""
    root = nn.Module()
    for name in names:
        node = root
        *parents, leaf = name.split(".")
        for part in parents:
            if part not in node._modules:
                node.add_module(part, nn.Module())
            node = node._modules[part]  # type: ignore[assignment]
        node.add_module(leaf, HookPoint())
    return root


def to_hooked(model: nn.Module) -> Any:
    """Any icdl model, every variant, as a TransformerLens ``HookedRootModule`` running icdl's own forward
    pass, with a ``HookPoint`` at each of ``model.hook_names()`` (the same names): TransformerLens'
    ``run_with_cache``, ``run_with_hooks`` (``fwd_hooks`` and ``bwd_hooks``), ``hooks()``, ``add_hook`` /
    ``reset_hooks``, ``hook_dict``. Unlike [`to_transformer_lens`][icdl.export.to_transformer_lens] nothing
    is re-expressed in TransformerLens blocks, so ReLU attention, EWML sublayers and row tokens (``paper``,
    ``compact``, ``no-ewml``, ``rows``) and ICL models with ``attention: relu`` are covered; TransformerLens
    tools that need its block classes (``cfg``, weights, ``start_at_layer``) are not.

    A compiled model is called on its prompt ``H`` (``hooked(H)``, the stream after the readout, with
    autograd, so backward hooks fire; the cache holds ``steps.{l}.{sublayer}.hook_out`` as icdl names it);
    an ICL model on ``(xs, ys)`` (its predictions). tests/test_tl_idioms.py checks the outputs and every
    cached activation against icdl's own ``run_with_cache`` in float64.
    """
    HookedRootModule, HookPoint = _hooked_root_module()
    if not isinstance(model, (CompiledModel, ICLTransformer)):
        raise InputError(
            f"cannot hook a {type(model).__name__}: to_hooked takes an ICLTransformer or a CompiledModel"
        )
    names = model.hook_names()

    class HookedIcdl(HookedRootModule):  # type: ignore[misc, valid-type]
        """icdl's forward pass with a TransformerLens ``HookPoint`` at every icdl hook point."""

        def __init__(self) -> None:
            super().__init__()
            self.source = model
            tree = _point_tree(names, HookPoint)
            for child, mod in tree.named_children():
                self.add_module(child, mod)
            self.setup()
            self.point_names = list(names)
            # the ground truth travels with a compiled model (icdl.inspect.ledger)
            self.ledger = ledger(model) if isinstance(model, CompiledModel) else None

        def forward(self, *prompt: Tensor) -> Tensor:
            point = self.hook_dict
            if isinstance(model, CompiledModel):
                (H,) = prompt
                return hooks.compiled_points(
                    model,
                    H,
                    lambda name, t: point[name](t),
                    point.__contains__,
                    grad=torch.is_grad_enabled(),
                )
            assert isinstance(model, ICLTransformer)
            xs, ys = prompt
            return model(xs, ys, hooks=lambda b, name, t: point[hook_name(b, name)](t))

    return HookedIcdl()
