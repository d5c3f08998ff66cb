"""Registry of constructions (``--variant``). Each variant supplies a layout, the sublayers of one GD step,
the readout sublayers and the expected effect of each of its roles (a
[`Variant`][icdl.construct.build.contract.Variant]); the compiler, verifier, CLI and save/load are shared and
know nothing about any particular variant.

The built-in variants are listed below, one line each. To add one: write its builders and its
``VARIANT = Variant(name="mine", summary="...", layout=..., block=..., readout=..., effects=...)`` in a module
next to [`icdl.construct.variants.paper`][icdl.construct.variants.paper] (plus ``sizes=`` and ``costs=``,
[`icdl.construct.engine.sizes`][icdl.construct.engine.sizes], when its token differs from the paper's: the
budget estimate reads them), and add a line to `VARIANTS` so that ``--variant mine`` finds it
([`register`][icdl.construct.variants.registry.register] adds one at run time, e.g. a toy variant in a test).
"""

from __future__ import annotations

from icdl.construct.build.contract import Variant
from icdl.construct.variants import compact, no_ewml, paper, rows, softmax
from icdl.errors import InputError

__all__ = ["VARIANTS", "Variant", "get_variant", "register", "unregister"]

# The built-in constructions, in the order ``--help`` lists them.
VARIANTS: dict[str, Variant] = {
    paper.VARIANT.name: paper.VARIANT,
    compact.VARIANT.name: compact.VARIANT,
    no_ewml.VARIANT.name: no_ewml.VARIANT,
    rows.VARIANT.name: rows.VARIANT,
    softmax.VARIANT.name: softmax.VARIANT,
}


def register(variant: Variant, *, replace: bool = False) -> Variant:
    """Add a variant to the registry at run time (names are unique unless ``replace``)."""
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
