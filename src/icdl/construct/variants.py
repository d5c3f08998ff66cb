"""Registry of constructions (``--variant``). Each variant supplies a layout and two builders; the compiler,
verifier, CLI and save/load are shared. Planned siblings (compact 2N+3, EWML-free, softmax, per-row
tokens) register here as new modules next to :mod:`icdl.construct.paper`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from icdl.construct import paper
from icdl.construct.blocks import BuildContext
from icdl.construct.layout import Layout
from icdl.errors import InputError
from icdl.nets import NetSpec

__all__ = ["VARIANTS", "Variant", "get_variant", "register"]


@dataclass(frozen=True)
class Variant:
    """A construction: ``layout(spec)``, ``block(ctx)`` (the sublayers of one GD step) and ``readout(ctx)``.

    Attributes:
        name: the ``--variant`` value.
        summary: one line for ``--help`` and docs.
        paper: whether this is the paper's construction as published (up to the documented fixes).
    """

    name: str
    summary: str
    layout: Callable[[NetSpec], Layout]
    block: Callable[[BuildContext], list[nn.Module]]
    readout: Callable[[BuildContext], list[nn.Module]]
    paper: bool = False


VARIANTS: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add a variant to the registry (names are unique)."""
    if variant.name in VARIANTS:
        raise ValueError(f"variant {variant.name!r} already registered")
    VARIANTS[variant.name] = variant
    return variant


def get_variant(name: str) -> Variant:
    """Look up a variant; unknown names are a user error."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise InputError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}") from None


register(
    Variant(
        name="paper",
        summary="Theorem 1 as published: 2N+4 sublayers per step (N+3 ReLU attention/MLP, N EWML)",
        layout=paper.layout,
        block=paper.build_block,
        readout=paper.build_readout,
        paper=True,
    )
)
