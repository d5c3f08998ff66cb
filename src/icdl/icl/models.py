"""The trainable ICL transformer: a small GPT-2-style decoder over interleaved x/y tokens.

Layout (Garg et al. 2022; the paper's App. F; docs/protocol.md): a prompt ``(x_1, y_1, ..., x_n, y_n)``
becomes the token sequence ``x_1, y_1, x_2, y_2, ..., x_n, y_n`` of length ``T = 2n``; every token is a
vector of size
``d_tok = max(d_x, d_y)``, x zero-padded to ``d_tok`` and y written as ``[y, 0, ..., 0]``. A read-in
``Linear(d_tok, d_model)`` and learned absolute positions feed ``layers`` pre-LN blocks; a read-out
``Linear(d_model, d_y)`` on the hidden state of every x-token predicts that point's y. Because of the
causal mask, the prediction at ``x_i`` uses only ``(x_1, y_1, ..., x_{i-1}, y_{i-1}, x_i)`` — one
forward pass predicts at every prefix, the shared predictor signature of ``icdl.icl``.

Attention (one flag, the paper's "sole difference" between its two models, App. F):

* ``softmax``: GPT-2 causal softmax attention via ``F.scaled_dot_product_attention(is_causal=True)``.
* ``relu``: ``A = relu(q k^T / sqrt(d_head))`` with future keys masked to 0, each row divided by its
  number of visible keys ``i + 1`` (``relu_norm="causal"``; 0-based query index i) or by the sequence
  length ``T`` (``relu_norm="length"``, the paper's ``sigma/n`` of Definition 7, Bai et al. 2023).
  The causal count keeps the scale of a row independent of the prompt length, so longer test prompts
  do not shrink early rows.

Usage:

```python
model = ICLTransformer(d_x=20, d_y=1, layers=4, heads=4, d_model=64, d_mlp=256, attention="relu")
preds = model(xs, ys)          # xs (B, n, 20), ys (B, n, 1) -> preds (B, n, 1)
preds, cache = model.run_with_cache(xs, ys)
cache["blocks.0.attn.hook_pattern"]   # (B, heads, 2n, 2n): block 0's attention weights per head
model.run_with_hooks(xs, ys, fwd_hooks=[("blocks.-1.hook_mlp_out", lambda act, hook: act * 0)])
```

Hook points (TransformerLens conventions, [`icdl.hooks`][icdl.hooks]): ``blocks.{i}.`` + the short name of
[`HOOK_NAMES`][icdl.icl.models.HOOK_NAMES] (forward order) with ``hook_`` before its last part
(``attn.pattern`` -> ``blocks.{i}.attn.hook_pattern``, ``resid_post`` -> ``blocks.{i}.hook_resid_post``).
Short names and shapes, TransformerLens' exactly: ``resid_pre``, ``ln1``, ``attn.q``/``attn.k``/``attn.v``
``(B, T, heads, d_head)`` (batch, position, head, d_head), ``attn.attn_scores`` ``(B, heads, T, T)`` (the
pre-nonlinearity scores ``q k^T / sqrt(d_head)``, future keys ``-inf``), ``attn.pattern`` ``(B, heads, T, T)``
(the weights that multiply ``v``: softmax probabilities, or the ReLU weights already divided by the row
normaliser), ``attn.z`` ``(B, T, heads, d_head)`` (heads' outputs before the output projection),
``attn.result`` ``(B, T, heads, d_model)`` (what each head adds to the stream, ``z_h W_O^h``; their sum plus
the output bias is ``attn_out``), ``attn_out``, ``resid_mid``, ``ln2``, ``mlp.pre``/``mlp.post``
(before/after GELU, ``(B, T, d_mlp)``), ``mlp_out``, ``resid_post`` (``(B, T, d_model)`` unless stated).
So the TransformerLens idiom for ablating head 0, ``z[:, :, 0] = 0`` at ``blocks.{i}.attn.hook_z``, does the
same on an icdl model and on its export. The old name ``attn.scores`` (``blocks.{i}.attn.hook_scores``) still
works, with a ``FutureWarning``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icdl.config import ModelConfig
from icdl.errors import InputError
from icdl.hooks import ActivationCache, hook_dispatcher, names_matcher

if TYPE_CHECKING:
    from icdl.hooks import ActivationCache, NamesFilter
    from icdl.hooks import HookFn as TLHookFn

__all__ = [
    "HOOK_NAMES",
    "MLP",
    "Block",
    "CausalSelfAttention",
    "HookFn",
    "ICLTransformer",
    "build_model",
    "hook_name",
    "relu_attention",
]

Attention = Literal["softmax", "relu"]
ReluNorm = Literal["causal", "length"]

HOOK_NAMES: tuple[str, ...] = (
    "resid_pre",
    "ln1",
    "attn.q",
    "attn.k",
    "attn.v",
    "attn.attn_scores",
    "attn.pattern",
    "attn.z",
    "attn.result",
    "attn_out",
    "resid_mid",
    "ln2",
    "mlp.pre",
    "mlp.post",
    "mlp_out",
    "resid_post",
)
"""The hook names of one block, in the order the forward pass reaches them."""

HookFn = Callable[[str, Tensor], Tensor]
"""``hook(name, activation) -> activation``: called at every named point of a block (the block index is
bound by the caller); returning a different tensor replaces the activation (an intervention)."""


def _no_hook(name: str, t: Tensor) -> Tensor:
    return t


def relu_attention(q: Tensor, k: Tensor, v: Tensor, norm: ReluNorm = "causal") -> Tensor:
    """Causal normalised ReLU attention.

    Args:
        q, k, v: ``(B, H, T, d_head)``.
        norm: ``causal`` divides row i by ``i + 1`` (visible keys), ``length`` by ``T``.

    Returns:
        ``(B, H, T, d_head)``: ``(mask ⊙ relu(q k^T / sqrt(d_head))) v / c`` with ``c`` the normaliser.

    Since ``relu(a s) = a relu(s)`` for ``a > 0``, the mask, ``1/sqrt(d_head)`` and ``1/c`` fold into one
    ``(T, T)`` weight matrix, applied with a single multiply after the ReLU.
    """
    T, d_head = q.shape[-2], q.shape[-1]
    rows = torch.arange(1, T + 1, device=q.device, dtype=q.dtype).unsqueeze(-1)  # (T, 1): visible keys
    denom = rows if norm == "causal" else torch.full_like(rows, float(T))
    weight = torch.ones(T, T, device=q.device, dtype=q.dtype).tril() / (denom * math.sqrt(d_head))  # (T, T)
    return (torch.relu(q @ k.transpose(-1, -2)) * weight) @ v


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (softmax or normalised ReLU) with a fused qkv projection."""

    def __init__(
        self, d_model: int, heads: int, attention: Attention, relu_norm: ReluNorm, dropout: float
    ) -> None:
        super().__init__()
        if d_model % heads:
            raise InputError(f"heads ({heads}) must divide d_model ({d_model})")
        self.heads = heads
        self.attention = attention
        self.relu_norm = relu_norm
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, h: Tensor, hook: HookFn | None = None) -> Tensor:
        """``h (B, T, d_model) -> (B, T, d_model)``; with ``hook``, the slow path that names q, k, v, the
        scores, the pattern, z and each head's result (the same function up to round-off)."""
        B, T, C = h.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads) for t in self.qkv(h).split(C, dim=-1))
        if hook is not None:  # q, k, v: (B, T, H, d_head), TransformerLens' layout
            return self.resid_drop(self._attend_explicit(q, k, v, hook))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, d_head)
        if self.attention == "softmax":
            a = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
            )
        else:
            a = relu_attention(q, k, v, self.relu_norm)
        a = a.transpose(1, 2).reshape(B, T, C)
        return self.resid_drop(self.proj(a))

    def _attend_explicit(self, q: Tensor, k: Tensor, v: Tensor, hook: HookFn) -> Tensor:
        """Attention with every intermediate materialised and passed through ``hook``, in TransformerLens'
        shapes: ``q, k, v (B, T, H, d_head) -> attn_out (B, T, d_model)`` (before dropout), through the
        scores and pattern ``(B, H, T, T)``, ``z (B, T, H, d_head)`` and ``result (B, T, H, d_model)``."""
        q, k, v = hook("attn.q", q), hook("attn.k", k), hook("attn.v", v)
        T, d_head = q.shape[1], q.shape[-1]
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, d_head)
        future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)  # (T, T): key after query
        scores = (qh @ kh.transpose(-1, -2) / math.sqrt(d_head)).masked_fill(future, float("-inf"))
        scores = hook("attn.attn_scores", scores)
        if self.attention == "softmax":
            pattern = torch.softmax(scores, dim=-1)
            if self.training and self.dropout:
                pattern = F.dropout(pattern, self.dropout)
        else:
            rows = torch.arange(1, T + 1, device=q.device, dtype=q.dtype).unsqueeze(-1)  # (T, 1)
            denom = rows if self.relu_norm == "causal" else torch.full_like(rows, float(T))
            pattern = torch.relu(scores).masked_fill(future, 0.0) / denom
        pattern = hook("attn.pattern", pattern)  # (B, H, T, T)
        z = hook("attn.z", (pattern @ vh).transpose(1, 2))  # (B, T, H, d_head)
        W_O = self.proj.weight.view(-1, self.heads, d_head)  # (d_model, H, d_head): head h's columns
        result = hook("attn.result", torch.einsum("bthd,mhd->bthm", z, W_O))  # (B, T, H, d_model)
        return result.sum(dim=2) + self.proj.bias


class MLP(nn.Module):
    """GPT-2 MLP: ``Linear(d_model, d_mlp) -> GELU(tanh) -> Linear(d_mlp, d_model)``."""

    def __init__(self, d_model: int, d_mlp: int, dropout: float) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, d_mlp)
        self.proj = nn.Linear(d_mlp, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, h: Tensor, hook: HookFn = _no_hook) -> Tensor:
        """``h (B, T, d_model) -> (B, T, d_model)``."""
        pre = hook("mlp.pre", self.fc(h))  # (B, T, d_mlp)
        post = hook("mlp.post", F.gelu(pre, approximate="tanh"))
        return self.drop(self.proj(post))


class Block(nn.Module):
    """Pre-LN transformer block: ``h + attn(ln1(h))``, then ``h + mlp(ln2(h))``."""

    def __init__(
        self, d_model: int, heads: int, d_mlp: int, attention: Attention, relu_norm: ReluNorm, dropout: float
    ) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, attention, relu_norm, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, d_mlp, dropout)

    def forward(self, h: Tensor, hook: HookFn | None = None) -> Tensor:
        """``h (B, T, d_model) -> (B, T, d_model)``; ``hook`` sees the points of
        [`HOOK_NAMES`][icdl.icl.models.HOOK_NAMES]."""
        if hook is None:
            h = h + self.attn(self.ln1(h))
            return h + self.mlp(self.ln2(h))
        h = hook("resid_pre", h)
        h = hook("resid_mid", h + hook("attn_out", self.attn(hook("ln1", self.ln1(h)), hook)))
        return hook("resid_post", h + hook("mlp_out", self.mlp(hook("ln2", self.ln2(h)), hook)))


class ICLTransformer(nn.Module):
    """GPT-2-style decoder predicting y at every x position of an interleaved prompt.

    Args:
        d_x, d_y: input and output dimensions of the task (``d_y = d_x`` for score estimation).
        layers, heads, d_model, d_mlp: block count, heads per block, residual width, MLP width.
        max_points: longest prompt (in points) the position table covers (``2 * max_points`` tokens).
        positions: ``learned`` (GPT-2's absolute table) or ``none`` (no position table; a learned
            x/y token-type embedding instead — the causal mask alone conveys order, and no position
            is left untrained when test prompts are longer than training prompts).
        attention: ``softmax`` or ``relu``; relu_norm: ``causal`` (1/(i+1)) or ``length`` (1/T).
        dropout: residual/embedding/attention dropout (0 in the paper's setting).
        config: a [`icdl.config.ModelConfig`][icdl.config.ModelConfig] taken whole (its fields replace the
            keywords above); ``model.config`` is the model's ModelConfig either way.

    Parameters are initialised as GPT-2 (normal, std 0.02; residual output projections scaled by
    ``1/sqrt(2 * layers)``); read-in and read-out keep PyTorch's Linear default, as Garg et al.
    """

    def __init__(
        self,
        d_x: int,
        d_y: int = 1,
        *,
        layers: int = 4,
        heads: int = 4,
        d_model: int = 64,
        d_mlp: int = 256,
        max_points: int = 101,
        positions: Literal["learned", "none"] = "learned",
        attention: Attention = "relu",
        relu_norm: ReluNorm = "causal",
        dropout: float = 0.0,
        config: ModelConfig | None = None,
    ) -> None:
        super().__init__()
        loops: int | None = None
        loop_window: int | None = None
        if config is not None:  # the config whole; its fields replace the keywords above
            layers, heads, d_model, d_mlp = config.layers, config.heads, config.d_model, config.d_mlp
            max_points, positions, dropout = config.max_points, config.positions, config.dropout
            attention, relu_norm = config.attention, config.relu_norm
            loops, loop_window = config.loops, config.loop_window
        # model_construct: no validation here, so the checks below keep their own one-line errors.
        self.config = config or ModelConfig.model_construct(
            attention=attention, relu_norm=relu_norm, layers=layers, heads=heads, d_model=d_model,
            d_mlp=d_mlp, max_points=max_points, positions=positions, dropout=dropout,
        )  # fmt: skip
        if attention not in ("softmax", "relu"):
            raise InputError(f"unknown attention {attention!r}; choose softmax or relu")
        self.d_x, self.d_y, self.max_points = d_x, d_y, max_points
        self.d_tok = max(d_x, d_y)
        self.read_in = nn.Linear(self.d_tok, d_model)
        if positions not in ("learned", "none"):
            raise InputError(f"unknown positions {positions!r}; choose learned or none")
        self.positions = positions
        # Exactly one of the two tables exists, so learned-position checkpoints keep their keys.
        self.wpe = nn.Embedding(2 * max_points, d_model) if positions == "learned" else None
        self.wtype = nn.Embedding(2, d_model) if positions == "none" else None
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(d_model, heads, d_mlp, attention, relu_norm, dropout) for _ in range(layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.read_out = nn.Linear(d_model, d_y)
        # A looped model (ModelConfig.loops): the blocks are one weight-tied unit, run `loops` passes.
        self.loops, self.loop_window = loops, loop_window
        self._init_gpt2(layers)

    def _init_gpt2(self, layers: int) -> None:
        for name, mod in self.named_modules():
            if name in ("read_in", "read_out"):
                continue
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, mean=0.0, std=0.02)
                if isinstance(mod, nn.Linear) and mod.bias is not None:
                    nn.init.zeros_(mod.bias)
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    @property
    def num_params(self) -> int:
        """Number of trainable parameters (all of them: there is no vocabulary table)."""
        return sum(p.numel() for p in self.parameters())

    def tokens(self, xs: Tensor, ys: Tensor) -> Tensor:
        """Interleave ``xs (B, n, d_x)`` and ``ys (B, n, d_y)`` into tokens ``(B, 2n, d_tok)``:
        ``x_1, y_1, ..., x_n, y_n`` with zero padding up to ``d_tok``."""
        B, n, _ = xs.shape
        x_tok = F.pad(xs, (0, self.d_tok - self.d_x))
        y_tok = F.pad(ys, (0, self.d_tok - self.d_y))
        return torch.stack((x_tok, y_tok), dim=2).reshape(B, 2 * n, self.d_tok)

    def forward(
        self,
        xs: Tensor,
        ys: Tensor,
        hooks: Callable[[int, str, Tensor], Tensor] | None = None,
        *,
        loops: int | None = None,
        window: int | None = None,
    ) -> Tensor:
        """Predict every point's label from its prefix.

        Args:
            xs: ``(B, n, d_x)``; ys: ``(B, n, d_y)`` (``ys[:, n-1]`` is never seen by any prediction).
            hooks: optional ``hooks(block, name, activation) -> activation`` called at every named point
                ([`HOOK_NAMES`][icdl.icl.models.HOOK_NAMES]); see
                [`run_with_cache`][icdl.icl.models.ICLTransformer.run_with_cache] and
                [`run_with_hooks`][icdl.icl.models.ICLTransformer.run_with_hooks]. In a looped model the
                block index is the unrolled one, ``pass * layers + block``.
            loops: a looped model's number of passes (default ``self.loops``); refused for an ordinary
                model.
            window: return the predictions of the last ``window`` passes, stacked ``(window, B, n, d_y)``,
                the passes before them run without gradients (training's loss window); None: the last
                pass only.

        Returns:
            ``(B, n, d_y)``: row i uses only ``x_0, y_0, ..., x_{i-1}, y_{i-1}, x_i``.
        """
        if xs.ndim != 3 or ys.ndim != 3 or xs.shape[:2] != ys.shape[:2]:
            raise InputError(
                f"xs (B, n, d_x) and ys (B, n, d_y) must agree, got {tuple(xs.shape)}, {tuple(ys.shape)}"
            )
        if xs.shape[-1] != self.d_x or ys.shape[-1] != self.d_y:
            raise InputError(
                f"model expects d_x = {self.d_x}, d_y = {self.d_y}, got {xs.shape[-1]}, {ys.shape[-1]}"
            )
        n = xs.shape[1]
        if n > self.max_points:
            raise InputError(
                f"prompt has {n} points, the model supports at most {self.max_points} (model.max_points)"
            )
        tok = self.tokens(xs, ys)  # (B, T, d_tok)
        if self.wpe is not None:
            where = self.wpe(torch.arange(2 * n, device=xs.device))  # (T, d_model)
        else:
            assert self.wtype is not None
            where = self.wtype.weight.repeat(n, 1)  # (T, d_model): x, y, x, y, ...
        h = self.drop(self.read_in(tok) + where)  # (B, T, d_model)
        if self.loops is None:
            if loops is not None or window is not None:
                raise InputError("loops / window are for a looped model (model.loops); this one is not")
            return self._read(self._pass(h, hooks, 0))
        return self._looped(h, hooks, self.loops if loops is None else loops, window)

    def _pass(self, h: Tensor, hooks: Callable[[int, str, Tensor], Tensor] | None, first: int) -> Tensor:
        """Every block once; hook block indices start at ``first``."""
        for i, block in enumerate(self.blocks):
            b = first + i
            h = block(h) if hooks is None else block(h, lambda name, t, b=b: hooks(b, name, t))
        return h

    def _read(self, h: Tensor) -> Tensor:
        return self.read_out(self.ln_f(h[:, 0::2]))  # x-token states only: (B, n, d_y)

    def _looped(
        self, e: Tensor, hooks: Callable[[int, str, Tensor], Tensor] | None, loops: int, window: int | None
    ) -> Tensor:
        """Yang et al.'s looped transformer: ``h_0 = 0``, ``h_{t+1} = blocks(h_t + e)`` (input injection of
        the embedded prompt ``e``), read out after the last pass (or each of the last ``window``)."""
        if not isinstance(loops, int) or isinstance(loops, bool) or loops < 1:
            raise InputError(f"loops must be an integer >= 1, got {loops!r}")
        if window is not None and not 1 <= window <= loops:
            raise InputError(f"window must be in 1..loops ({loops}), got {window!r}")
        keep = 1 if window is None else window
        h = torch.zeros_like(e)
        outs = []
        for t in range(loops):
            # the passes before the window carry no gradient (truncated backpropagation, Yang et al.)
            with torch.set_grad_enabled(torch.is_grad_enabled() and (window is None or t >= loops - keep)):
                h = self._pass(h + e, hooks, t * len(self.blocks))
            if t >= loops - keep:
                outs.append(self._read(h))
        return outs[-1] if window is None else torch.stack(outs)

    def hook_names(self) -> list[str]:
        """Every hook point's name, in forward order: ``blocks.{i}.hook_resid_pre``,
        ``blocks.{i}.attn.hook_q``, ... ([`hook_name`][icdl.icl.models.hook_name] of each entry of
        [`HOOK_NAMES`][icdl.icl.models.HOOK_NAMES])."""
        return [hook_name(b, name) for b in range(self.depth) for name in HOOK_NAMES]

    @property
    def depth(self) -> int:
        """Blocks a forward pass runs: ``layers``, times ``loops`` for a looped model (its hook names are
        the unrolled ``blocks.{pass * layers + block}``)."""
        return len(self.blocks) * (self.loops or 1)

    def _counts(self) -> dict[str, int]:
        return {"blocks": self.depth}

    @torch.no_grad()
    def run_with_cache(
        self, xs: Tensor, ys: Tensor, names_filter: NamesFilter = None, *, names: Any = None
    ) -> tuple[Tensor, ActivationCache]:
        """Run the model and record activations (TransformerLens' ``run_with_cache``).

        Args:
            xs, ys: as `forward`.
            names_filter: which hook points ([`icdl.hooks.NamesFilter`][icdl.hooks.NamesFilter]: None for all,
                a name, a list of names or a predicate on the name); negative block indices count from the
                end.
            names: the old filter, a predicate on ``(block, short name)``.

        Returns:
            ``(preds, cache)``: the predictions (equal to ``model(xs, ys)`` up to round-off) and an
            [`icdl.hooks.ActivationCache`][icdl.hooks.ActivationCache] keyed by hook name (detached tensors);
            the old keys ``cache[block, "attn.pattern"]`` work too.
        """
        match = names_matcher(names_filter, self.hook_names(), self._counts())
        store: dict[str, Tensor] = {}

        def record(block: int, name: str, t: Tensor) -> Tensor:
            full = hook_name(block, name)
            if match(full) and (names is None or names((block, name))):
                store[full] = t.detach()
            return t

        preds = self(xs, ys, hooks=record)
        return preds, ActivationCache(store, kind="icl", counts=self._counts(), legacy=self._legacy_key)

    def _legacy_key(self, key: tuple[Any, ...]) -> str:
        from icdl.hooks import resolve_name

        if len(key) != 2 or not isinstance(key[0], int) or not isinstance(key[1], str):
            raise InputError(f"no activation {key!r}; keys are hook names, e.g. {self.hook_names()[0]!r}")
        name = resolve_name(hook_name(key[0], key[1]), self._counts())
        if name not in self.hook_names():
            raise InputError(f"no activation {key!r}; keys are hook names, e.g. {self.hook_names()[0]!r}")
        return name

    def run_with_hooks(
        self,
        xs: Tensor,
        ys: Tensor,
        fwd_hooks: Sequence[tuple[NamesFilter, TLHookFn]]
        | Mapping[tuple[int, str], Callable[[Tensor], Tensor]],
    ) -> Tensor:
        """Run the model with interventions (TransformerLens' ``run_with_hooks``).

        ``fwd_hooks`` is a list of ``(name or filter, fn)``; ``fn(activation, hook)`` (``hook.name`` is the
        point's name) returns the activation to use from there on, or ``None`` to keep the one it was
        given (e.g. edited in place). The old form ``{(block, short name): fn(activation)}`` still works.
        """
        if isinstance(fwd_hooks, Mapping):
            short = (*HOOK_NAMES, "attn.scores")  # the old name resolves (with a warning)
            unknown = set(fwd_hooks) - {(b, n) for b in range(self.depth) for n in short}
            if unknown:
                raise InputError(f"unknown hook point(s) {sorted(unknown)}; see model.hook_names()")
            fwd_hooks = [(hook_name(b, n), _ignore_point(fn)) for (b, n), fn in fwd_hooks.items()]
        apply = hook_dispatcher(fwd_hooks, self.hook_names(), self._counts())
        return self(xs, ys, hooks=lambda block, name, t: apply(hook_name(block, name), t))


OldHook = Callable[[Tensor], Tensor]
"""The old ``run_with_hooks`` value: ``fn(activation) -> activation``."""


def _ignore_point(fn: OldHook) -> TLHookFn:
    return lambda t, hook: fn(t)


def hook_name(block: int, name: str) -> str:
    """The full hook name of a short one: ``(0, "attn.pattern") -> "blocks.0.attn.hook_pattern"``,
    ``(1, "resid_post") -> "blocks.1.hook_resid_post"`` (the last dotted part gets the ``hook_`` prefix)."""
    head, _, last = name.rpartition(".")
    return f"blocks.{block}." + (f"{head}." if head else "") + f"hook_{last}"


def build_model(cfg: ModelConfig, d_x: int, d_y: int) -> ICLTransformer:
    """The [`ICLTransformer`][icdl.icl.models.ICLTransformer] of a model config for a task with dimensions
    ``d_x -> d_y``."""
    return ICLTransformer(d_x, d_y, config=cfg)
