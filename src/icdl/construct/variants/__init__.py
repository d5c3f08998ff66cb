"""The constructions (``--variant``), one module each ([`paper`][icdl.construct.variants.paper],
[`compact`][icdl.construct.variants.compact], [`no_ewml`][icdl.construct.variants.no_ewml],
[`rows`][icdl.construct.variants.rows], [`softmax`][icdl.construct.variants.softmax]), and the registry
that lists them ([`registry`][icdl.construct.variants.registry]; its names are re-exported here, so
``icdl.construct.variants.get_variant`` keeps working)."""

from icdl.construct.variants.registry import VARIANTS, Variant, get_variant, register, unregister

__all__ = ["VARIANTS", "Variant", "get_variant", "register", "unregister"]
