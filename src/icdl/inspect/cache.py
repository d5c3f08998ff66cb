"""One activation cache for both model kinds, keyed by named points (TransformerLens' ``ActivationCache``).

* A trained ICL transformer (:meth:`icdl.icl.models.ICLTransformer.run_with_cache`) keys activations
  ``(block, hook name)``, e.g. ``(0, "attn.pattern")`` ``(B, heads, T, T)``.
* A compiled GD transformer (:func:`icdl.inspect.compiled.run_with_cache`) keys the residual stream
  after each sublayer ``(step, sublayer name)`` ``(B, T, D)``; a third key element, a slot name, slices
  the slot's coordinates: ``cache[step, name, "w"]`` is ``(B, T, width of w)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from torch import Tensor

from icdl.errors import InputError

__all__ = ["ActivationCache"]

Key = tuple[Any, ...]


class ActivationCache(Mapping[Key, Tensor]):
    """Read-only mapping from named points to activations, in the order the forward pass reached them.

    Args:
        store: ``{key: tensor}`` in forward order.
        kind: ``icl`` (keys ``(block, hook name)``) or ``compiled`` (keys ``(step, sublayer name)``).
        slots: for ``compiled``, ``slot name -> coordinate indices`` (from the model's layout), so that
            ``cache[step, name, slot]`` returns the slot's coordinates.
    """

    def __init__(
        self,
        store: dict[Key, Tensor],
        kind: Literal["icl", "compiled"],
        slots: Mapping[str, list[int]] | None = None,
    ) -> None:
        self._store = dict(store)
        self.kind = kind
        self._slots = dict(slots or {})

    def __getitem__(self, key: Key) -> Tensor:
        if not isinstance(key, tuple):
            raise InputError(f"cache keys are tuples, e.g. {next(iter(self._store), None)}; got {key!r}")
        if len(key) == 3 and self.kind == "compiled":
            step, name, slot = key
            if slot not in self._slots:
                raise InputError(f"unknown slot {slot!r}; slots: {', '.join(self._slots)}")
            return self[step, name][..., self._slots[slot]]
        if key not in self._store:
            raise InputError(f"no activation {key!r} in the cache; names: {self._preview()}")
        return self._store[key]

    def _preview(self, k: int = 6) -> str:
        keys = list(self._store)
        shown = ", ".join(map(repr, keys[:k]))
        return shown + (f", ... ({len(keys)} in all)" if len(keys) > k else "")

    def __iter__(self) -> Iterator[Key]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def names(self) -> list[Key]:
        """Every key, in forward order."""
        return list(self._store)

    @property
    def slots(self) -> list[str]:
        """Slot names usable as the third key element (compiled models only)."""
        return list(self._slots)

    def __repr__(self) -> str:
        return f"ActivationCache(kind={self.kind!r}, {len(self)} activations: {self._preview(3)})"
