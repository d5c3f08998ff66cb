"""Registry of constructions (``--variant``). Each variant supplies a layout, the sublayers of one GD step,
the readout sublayers and the expected effect of each of its roles (:mod:`icdl.construct.contract`); the
compiler, verifier, CLI and save/load are shared and know nothing about any particular variant.

To add one: write its builders (a module next to :mod:`icdl.construct.paper`), then::

    register(Variant(name="mine", summary="...", layout=..., block=..., readout=..., effects=...))

and import that module at the bottom of this file so that ``--variant mine`` finds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icdl.construct.blocks import BuildContext
from icdl.construct.contract import EffectsFn
from icdl.construct.layers import Sublayer
from icdl.construct.layout import Layout
from icdl.errors import InputError
from icdl.nets import NetSpec

if TYPE_CHECKING:
    from icdl.construct.compile import GDConfig

__all__ = ["VARIANTS", "Variant", "get_variant", "register"]


@dataclass(frozen=True)
class Variant:
    """A construction.

    Attributes:
        name: the ``--variant`` value.
        summary: one line for ``--help`` and docs.
        layout: ``spec -> Layout``.
        block: ``BuildContext -> sublayers of one GD step`` (built once, applied L times).
        readout: ``BuildContext -> sublayers after the last step`` (write the prediction into Y).
        effects: ``(info, layout) -> list[Expect]``: what must hold after each of its sublayers.
        paper: whether this is the paper's construction as published (up to the documented fixes).
        check: optional ``GDConfig -> None`` raising :class:`~icdl.errors.InputError` for configurations
            the variant cannot build (e.g. a non-ReLU activation).
        ranges: optional ``Reference -> int``: how many arguments (or groups of them) of the variant's own
            approximations (products as sums of ReLUs) leave the ranges they were fitted on at this step. The
            verifier adds them to ``out_of_range_count``: a sublayer check against the construction's own
            surrogate cannot see an approximation used outside its range.
    """

    name: str
    summary: str
    layout: Callable[[NetSpec], Layout]
    block: Callable[[BuildContext], list[Sublayer]]
    readout: Callable[[BuildContext], list[Sublayer]]
    effects: EffectsFn
    paper: bool = False
    check: Callable[[GDConfig], Any] | None = None
    ranges: Callable[[Any], int] | None = None


VARIANTS: dict[str, Variant] = {}


def register(variant: Variant, *, replace: bool = False) -> Variant:
    """Add a variant to the registry (names are unique unless ``replace``)."""
    if variant.name in VARIANTS and not replace:
        raise ValueError(f"variant {variant.name!r} already registered")
    VARIANTS[variant.name] = variant
    return variant


def unregister(name: str) -> None:
    """Remove a variant (tests that register a toy variant clean up with this)."""
    VARIANTS.pop(name, None)


def get_variant(name: str) -> Variant:
    """Look up a variant; unknown names are a user error."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise InputError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}") from None


# The built-in variants register themselves on import.
from icdl.construct import compact, no_ewml, paper, rows, softmax  # noqa: E402, F401
