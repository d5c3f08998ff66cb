"""Named hook points and the activation cache shared by both model kinds (TransformerLens conventions).

Both the trained ICL transformer ([`icdl.icl.models.ICLTransformer`][icdl.icl.models.ICLTransformer]) and the
compiled GD transformer ([`icdl.construct.compile.CompiledModel`][icdl.construct.compile.CompiledModel])
expose the same three methods:

* ``model.hook_names()``: every hook point's string name, in forward order;
* ``model.run_with_cache(prompt, names_filter=None)``: ``(output, ActivationCache)``;
* ``model.run_with_hooks(prompt, fwd_hooks=[(name_or_filter, fn), ...])``: the output with interventions,
  ``fn(activation, hook)`` receiving a [`HookPoint`][icdl.hooks.HookPoint] (``hook.name``) and returning a new
  activation, or ``None`` to keep the (possibly in-place modified) one.

``names_filter`` (and the first element of a ``fwd_hooks`` pair) is ``None`` (every point), one name,
a list of names, or a predicate ``name -> bool``. A name may count its block or step from the end:
``blocks.-1.hook_resid_post``, ``steps.-1.update.hook_out``.

Names: trained model ``blocks.{i}.hook_resid_pre``, ``blocks.{i}.attn.hook_pattern``, ... (one per
entry of [`icdl.icl.models.HOOK_NAMES`][icdl.icl.models.HOOK_NAMES], the last dotted part prefixed ``hook_``);
compiled model ``hook_prompt`` (the input), ``steps.{l}.{sublayer}.hook_out`` (the stream after a sublayer of
GD step l, 0-based) and ``readout.{sublayer}.hook_out``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from icdl.errors import InputError

__all__ = [
    "ActivationCache",
    "FwdHooks",
    "HookFn",
    "HookPoint",
    "NamesFilter",
    "get_act_name",
    "hook_dispatcher",
    "names_matcher",
    "resolve_name",
]

NamesFilter = None | str | Sequence[str] | Callable[[str], bool]
"""Which hook points: ``None`` (all), a name, a list of names, or a predicate on the name."""


@dataclass(frozen=True)
class HookPoint:
    """The point a hook function is called at (TransformerLens' ``HookPoint``): ``name`` is its full
    string name, e.g. ``blocks.0.attn.hook_pattern`` or ``steps.2.update.hook_out``."""

    name: str


HookFn = Callable[[Tensor, HookPoint], Tensor | None]
"""``fn(activation, hook) -> new activation or None`` (None keeps the activation, e.g. edited in place)."""

FwdHooks = Sequence[tuple[NamesFilter, HookFn]]
"""``run_with_hooks``' argument: ``[(name or filter, fn), ...]``."""

_INDEXED = re.compile(r"^(blocks|steps)\.(-?\d+)\.")


RENAMED: dict[str, str] = {"attn.hook_scores": "attn.hook_attn_scores"}
"""Old hook-name endings and their TransformerLens names (the old ones still resolve, with a warning)."""


def _renamed(name: str) -> str:
    for old, new in RENAMED.items():
        if name.endswith("." + old):
            warnings.warn(
                f"hook point {name!r} is now {name.removesuffix(old) + new!r} (TransformerLens' name)",
                FutureWarning,
                stacklevel=4,
            )
            return name.removesuffix(old) + new
    return name


def get_act_name(name: str, layer: int | None = None, layer_type: str | None = None) -> str:
    """TransformerLens' ``utils.get_act_name`` (the same rules, without importing it): ``("pattern", 0)`` ->
    ``blocks.0.attn.hook_pattern``, ``("resid_post", 1)`` -> ``blocks.1.hook_resid_post``, ``("z", 2)`` ->
    ``blocks.2.attn.hook_z``, ``("post", 0)`` -> ``blocks.0.mlp.hook_post``, ``"pattern3"`` ->
    ``blocks.3.attn.hook_pattern``; a full name (with a dot or ``hook_``) is returned as it is."""
    if ("." in name or name.startswith("hook_")) and layer is None and layer_type is None:
        return name
    m = re.match(r"([a-z]+)(\d+)([a-z]?.*)", name)
    if m is not None:
        name, layer, layer_type = m.group(1), int(m.group(2)), m.group(3)
    alias = {"attn": "pattern", "attn_logits": "attn_scores", "key": "k", "query": "q", "value": "v",
             "mlp_pre": "pre", "mlp_mid": "mid", "mlp_post": "post"}  # fmt: skip
    name = alias.get(name, name)
    full = "" if layer is None else f"blocks.{layer}."
    if name in ("k", "v", "q", "z", "rot_k", "rot_q", "result", "pattern", "attn_scores"):
        layer_type = "attn"
    elif name in ("pre", "post", "mid", "pre_linear"):
        layer_type = "mlp"
    elif layer_type in ("a", "m", "b", "block", "blocks", "attention"):
        layer_type = {"a": "attn", "m": "mlp", "attention": "attn"}.get(layer_type, "")
    full += f"{layer_type}." if layer_type else ""
    full += f"hook_{name}"
    return f"ln_final.{full}" if name in ("scale", "normalized") and layer is None else full


def resolve_name(name: str, counts: Mapping[str, int]) -> str:
    """``name`` with a negative block or step index counted from the end (``steps.-1.`` -> ``steps.{L-1}.``);
    ``counts`` maps ``blocks``/``steps`` to their number. An index out of range is an ``InputError``. An old
    name of [`RENAMED`][icdl.hooks.RENAMED] becomes the new one, with a ``FutureWarning``."""
    name = _renamed(name)
    m = _INDEXED.match(name)
    if m is None or m.group(1) not in counts:
        return name
    n, i = counts[m.group(1)], int(m.group(2))
    if not -n <= i < n:
        raise InputError(f"{name!r}: {m.group(1)} index {i} out of range for {n} {m.group(1)}")
    return f"{m.group(1)}.{i % n}." + name[m.end() :]


def names_matcher(
    names_filter: NamesFilter, all_names: Sequence[str], counts: Mapping[str, int]
) -> Callable[[str], bool]:
    """A predicate on canonical names from a [`NamesFilter`][icdl.hooks.NamesFilter]; names given literally
    must exist."""
    if names_filter is None:
        return lambda name: True
    if callable(names_filter):
        return names_filter
    wanted = [names_filter] if isinstance(names_filter, str) else list(names_filter)
    chosen = {resolve_name(n, counts) for n in wanted}
    unknown = sorted(chosen - set(all_names))
    if unknown:
        raise InputError(f"unknown hook point(s) {unknown}; see model.hook_names()")
    return chosen.__contains__


def hook_dispatcher(
    fwd_hooks: Sequence[tuple[NamesFilter, HookFn]], all_names: Sequence[str], counts: Mapping[str, int]
) -> Callable[[str, Tensor], Tensor]:
    """``apply(name, activation) -> activation``: every ``fn`` whose filter matches ``name`` runs, in the
    order given; a ``fn`` returning ``None`` keeps the activation it was passed. A ``fn`` returning a tensor
    of another shape (e.g. fewer tokens) is an ``InputError``: the run would otherwise continue on it."""
    pairs = [(names_matcher(f, all_names, counts), fn) for f, fn in fwd_hooks]

    def apply(name: str, t: Tensor) -> Tensor:
        for match, fn in pairs:
            if match(name):
                out = fn(t, HookPoint(name))
                if out is not None and tuple(out.shape) != tuple(t.shape):
                    raise InputError(
                        f"a hook at {name!r} returned shape {tuple(out.shape)} for an activation of shape "
                        f"{tuple(t.shape)}; a hook must keep the shape"
                    )
                t = t if out is None else out
        return t

    return apply


Key = str | tuple[Any, ...]


class ActivationCache(Mapping[str, Tensor]):
    """Read-only mapping from hook names to activations, in the order the forward pass reached them.

    Args:
        store: ``{name: tensor}`` in forward order (names as [`icdl.hooks`][icdl.hooks] documents).
        kind: ``icl`` (a trained model) or ``compiled`` (a compiled GD transformer).
        slots: for ``compiled``, ``slot name -> coordinate indices`` (from the model's layout), so that
            ``cache[name, slot]`` returns the slot's coordinates, e.g. ``cache["steps.2.update.hook_out",
            "W"]``.
        counts: ``{"blocks": n}`` or ``{"steps": L}`` for negative indices in names.
        legacy: translates an old tuple key (``(block, "attn.pattern")``, ``(step, sublayer)``) to a name.
    """

    def __init__(
        self,
        store: dict[str, Tensor],
        kind: Literal["icl", "compiled"],
        slots: Mapping[str, list[int]] | None = None,
        *,
        counts: Mapping[str, int] | None = None,
        legacy: Callable[[tuple[Any, ...]], str] | None = None,
    ) -> None:
        self._store = dict(store)
        self.kind = kind
        self._slots = dict(slots or {})
        self._counts = dict(counts or {})
        self._legacy = legacy

    def _name(self, key: Key) -> str:
        if isinstance(key, str):
            return resolve_name(key, self._counts)
        if self._legacy is None:
            raise InputError(
                f"cache keys are hook names, e.g. {next(iter(self._store), None)!r}; got {key!r}"
            )
        return self._legacy(key)

    def _act_name(self, key: tuple[Any, ...]) -> str | None:
        """TransformerLens' ``cache["pattern", 0]`` form (``get_act_name(*key)``) for an ICL cache;
        ``cache["update", 1]`` (``steps.1.update.hook_out``) for a compiled one; None for other keys."""
        if not (
            1 < len(key) <= 3 and isinstance(key[0], str) and "." not in key[0] and "hook_" not in key[0]
        ):
            return None
        if (
            not isinstance(key[1], int)
            or isinstance(key[1], bool)
            or (self.kind == "compiled" and len(key) == 3)
        ):
            return None
        if self.kind == "compiled":
            return f"steps.{key[1]}.{key[0]}.hook_out"
        return get_act_name(*key)

    def __getitem__(self, key: Key) -> Tensor:
        slot: Any = None
        point: Key = key
        act = self._act_name(key) if isinstance(key, tuple) else None
        if act is not None:
            point = act
        elif isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str) and "hook_" in key[0]:
            point, slot = key[0], key[1]  # (hook name, slot)
        elif isinstance(key, tuple) and len(key) == 3 and self.kind == "compiled":
            point, slot = key[:2], key[2]  # the old (step, sublayer, slot) form
        name = self._name(point)
        if name not in self._store:
            raise InputError(f"no activation {key!r} in the cache; names: {self._preview()}")
        if slot is None:
            return self._store[name]
        if slot not in self._slots:
            raise InputError(f"unknown slot {slot!r}; slots: {', '.join(self._slots)}")
        return self._store[name][..., self._slots[slot]]

    def _preview(self, k: int = 6) -> str:
        keys = list(self._store)
        shown = ", ".join(keys[:k])
        return shown + (f", ... ({len(keys)} in all)" if len(keys) > k else "")

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except (InputError, KeyError, TypeError, ValueError):
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def names(self) -> list[str]:
        """Every hook name, in forward order."""
        return list(self._store)

    def remove_batch_dim(self) -> ActivationCache:
        """The cache of a batch of one without its batch dimension (TransformerLens'
        ``remove_batch_dim``): every activation ``t[0]``; a batch of another size is an ``InputError``."""
        sizes = {t.shape[0] for t in self._store.values()}
        if sizes - {1}:
            raise InputError(f"remove_batch_dim needs a batch of one; this cache's batch is {sorted(sizes)}")
        out = ActivationCache(
            {k: t[0] for k, t in self._store.items()}, self.kind, self._slots, counts=self._counts
        )
        out._legacy = self._legacy
        return out

    @property
    def slots(self) -> list[str]:
        """Slot names usable as the second key element (compiled models only)."""
        return list(self._slots)

    def __repr__(self) -> str:
        return f"ActivationCache(kind={self.kind!r}, {len(self)} activations: {self._preview(3)})"


# --------------------------------------------------------------------------------------------------
# The compiled GD transformer (duck-typed: ``run``, ``block_layers``, ``readout_layers``, ``steps``,
# ``layout``), so that this module stays at the bottom of the package.
# --------------------------------------------------------------------------------------------------

PROMPT = "hook_prompt"
"""The compiled model's input stream ``H`` (before step 0)."""

OUT, WRITE, RESULT = "hook_out", "hook_write", "hook_result"
"""The hook points of one compiled sublayer, in the order they fire: ``hook_result`` (what each head adds,
``(B, T, heads, D)``; only with ``model.use_attn_result``, as in TransformerLens), ``hook_write`` (what the
sublayer writes, ``(B, T, D)``) and ``hook_out`` (the stream after it)."""


def _parts(model: Any, readout: bool) -> list[tuple[str, Sequence[Any]]]:
    parts: list[tuple[str, Sequence[Any]]] = [(f"steps.{l}", model.block_layers) for l in range(model.steps)]
    return parts + ([("readout", model.readout_layers)] if readout else [])


def _has_results(model: Any, m: Any) -> bool:
    return bool(getattr(model, "use_attn_result", False)) and hasattr(m, "head_results")


def compiled_hook_names(model: Any, readout: bool = True) -> list[str]:
    """``hook_prompt``, then for every step and sublayer ``steps.{l}.{sublayer}.hook_result`` (head
    sublayers, with ``model.use_attn_result``), ``.hook_write`` and ``.hook_out``; then (with ``readout``)
    the same for ``readout.{sublayer}``; in forward order."""
    names = [PROMPT]
    for where, layers in _parts(model, readout):
        for m in layers:
            base = f"{where}.{m.info.name}"
            names += [f"{base}.{RESULT}"] if _has_results(model, m) else []
            names += [f"{base}.{WRITE}", f"{base}.{OUT}"]
    return names


def _point_name(point: Any) -> str:
    where = "readout" if point.step is None else f"steps.{point.step}"
    return f"{where}.{point.name}.{OUT}"


def compiled_legacy_key(key: tuple[Any, ...], steps: int) -> str:
    """The hook name of an old compiled cache key: ``(0, "prompt")`` -> ``hook_prompt``, ``(step,
    sublayer)`` -> ``steps.{step}.{sublayer}.hook_out``, ``("readout", sublayer)`` -> ``readout....``."""
    if len(key) != 2:
        raise InputError(f"no activation {key!r}; keys are hook names such as 'steps.0.update.hook_out'")
    step, name = key
    if key == (0, "prompt"):
        return PROMPT
    if step == "readout":
        return f"readout.{name}.hook_out"
    if isinstance(step, int) and -steps <= step < 0:
        step += steps
    return f"steps.{step}.{name}.hook_out"


def written_value(m: Any, H_in: Tensor, out: Tensor) -> Tensor:
    """What sublayer ``m`` writes (its ``hook_write``): ``out - H_in`` where it adds to the stream, and the
    new value ``out`` on the coordinates it rewrites (``m.rewritten_coords()``), so that the stream after it
    is ``H_in`` with those coordinates cleared, plus this. Patching it from another prompt then puts that
    prompt's values where the sublayer overwrites, instead of adding a difference of differences."""
    delta = out - H_in
    rw = m.rewritten_coords().to(out.device)
    if rw.numel() == 0:
        return delta
    mask = torch.zeros(out.shape[-1], dtype=torch.bool, device=out.device)
    mask[rw] = True
    return torch.where(mask, out, delta)


def _edited(fn: Callable[[Tensor], Tensor], t: Tensor) -> Tensor | None:
    """``fn(t) - t`` when ``fn`` changed ``t`` (returned another value or edited it in place), else None."""
    before = t.clone()
    after = fn(t)
    return None if torch.equal(after, before) else after - before


def compiled_points(
    model: Any,
    H: Tensor,
    on_point: Callable[[str, Tensor], Tensor],
    wanted: Callable[[str], bool],
    *,
    readout: bool = True,
    grad: bool | None = None,
) -> Tensor:
    """``model.run(H)`` with ``on_point(name, activation)`` called at every hook point ``wanted`` picks
    ([`compiled_hook_names`][icdl.hooks.compiled_hook_names]); what it returns is what the run goes on with.

    An edit of ``hook_result`` (head m's added vector) or ``hook_write`` changes the stream after the
    sublayer by exactly the edit (``out + edit``); an unchanged one leaves the compiled output bit for bit,
    so the kernels' exact cancellations survive a cache or a no-op hook.
    """
    state = [on_point(PROMPT, H) if wanted(PROMPT) else H]

    def trace(point: Any, out: Tensor) -> Tensor:
        m = (model.readout_layers if point.step is None else model.block_layers)[point.index]
        base = _point_name(point).removesuffix(OUT)
        H_in = state[0]
        if wanted(base + RESULT) and _has_results(model, m):
            edit = _edited(lambda R: on_point(base + RESULT, R), m.head_results(H_in))
            out = out if edit is None else out + edit.sum(dim=2)
        if wanted(base + WRITE):
            edit = _edited(lambda W: on_point(base + WRITE, W), written_value(m, H_in, out))
            out = out if edit is None else out + edit
        if wanted(base + OUT):
            out = on_point(base + OUT, out)
        state[0] = out
        return out

    return model.run(state[0], trace=trace, readout=readout, grad=grad)


def _result_flag(model: Any, names_filter: NamesFilter) -> None:
    wanted = [names_filter] if isinstance(names_filter, str) else names_filter
    off = isinstance(wanted, Sequence) and not getattr(model, "use_attn_result", False)
    if off and any(str(n).endswith("." + RESULT) for n in wanted):  # type: ignore[union-attr]
        raise InputError(
            "per-head hook_result points are off: set model.use_attn_result = True first "
            "(as TransformerLens' cfg.use_attn_result)"
        )


def compiled_run_with_cache(
    model: Any, H: Tensor, names_filter: NamesFilter = None, *, readout: bool = True, grad: bool | None = None
) -> tuple[Tensor, ActivationCache]:
    """``(model.run(H), cache)`` with the activation at every chosen hook point (``hook_out``: the residual
    stream ``(B, T, D)``)."""
    counts = {"steps": model.steps}
    _result_flag(model, names_filter)
    match = names_matcher(names_filter, compiled_hook_names(model, readout), counts)
    store: dict[str, Tensor] = {}

    def keep(name: str, t: Tensor) -> Tensor:
        store[name] = t.detach().clone()
        return t

    out = compiled_points(model, H, keep, match, readout=readout, grad=grad)
    slots = {s.label: list(s.indices) for s in model.layout.slots}
    return out, ActivationCache(
        store,
        kind="compiled",
        slots=slots,
        counts=counts,
        legacy=lambda key: compiled_legacy_key(key, model.steps),
    )


def compiled_run_with_hooks(
    model: Any, H: Tensor, fwd_hooks: FwdHooks, *, readout: bool = True, grad: bool | None = None
) -> Tensor:
    """``model.run(H)`` with every ``fn`` of ``fwd_hooks`` applied where its filter matches; the stream
    a hook returns is what the next sublayer reads."""
    names, counts = compiled_hook_names(model, readout), {"steps": model.steps}
    for f, _ in fwd_hooks:
        _result_flag(model, f)
    apply = hook_dispatcher(fwd_hooks, names, counts)
    matchers = [names_matcher(f, names, counts) for f, _ in fwd_hooks]
    return compiled_points(
        model, H, apply, lambda name: any(mt(name) for mt in matchers), readout=readout, grad=grad
    )
