"""The compiler of Theorem 1, its variants and its verifier (docs/architecture.md has the module map and
the import layers that ``lint-imports`` checks).

* [`layout`][icdl.construct.layout] — named slots of the token (docs/construction.md, "Layout").
* [`tables`][icdl.construct.tables], [`layers`][icdl.construct.layers], [`ranged`][icdl.construct.ranged] —
  the compact sublayers (ReLU/softmax attention, EWML, ReLU MLP; the same on token ranges); each describes
  itself with an [`icdl.sublayer.SublayerInfo`][icdl.sublayer.SublayerInfo] derived from its tables.
* [`terms`][icdl.construct.terms] — the sum-of-ReLU terms, conditioned for exact floating point.
* [`context`][icdl.construct.context] — [`BuildContext`][icdl.construct.context.BuildContext], what every
  builder gets.
* [`blocks`][icdl.construct.blocks] — one builder per sublayer role (Lemmas 2-5, (C.16), Proj_W, readout) and
  each role's expected effect.
* [`contract`][icdl.construct.contract] — [`Expect`][icdl.construct.contract.Expect] (what a sublayer must
  leave in which slot), the verifier's [`Reference`][icdl.construct.contract.Reference] and
  [`Variant`][icdl.construct.contract.Variant]; [`sizes`][icdl.construct.sizes] — a variant's closed-form
  ``Sizes`` and ``Costs`` (``Variant.sizes``, ``Variant.costs``), read by
  [`estimate`][icdl.construct.estimate] for ``icdl construct``'s budget estimate.
* [`paper`][icdl.construct.paper], [`compact`][icdl.construct.compact], [`no_ewml`][icdl.construct.no_ewml],
  [`rows`][icdl.construct.rows], [`softmax`][icdl.construct.softmax] — variants, listed in
  [`variants`][icdl.construct.variants].
* [`ranges`][icdl.construct.ranges] — a-priori bounds on every argument of the fitted sums and products
  along the GD trajectory of a prompt (``radius="auto"``, ``icdl construct --range auto``).
* [`compile`][icdl.construct.compile] —
  [`compile_gd_transformer`][icdl.construct.compile.compile_gd_transformer],
  [`GDConfig`][icdl.construct.compile.GDConfig], [`CompiledModel`][icdl.construct.compile.CompiledModel],
  [`build_prompt`][icdl.construct.compile.build_prompt], [`sample_task`][icdl.construct.task.sample_task].
* [`verify`][icdl.construct.verify] — [`verify`][icdl.construct.verify] (trace, compare, report) against
  reference GD.
* [`store`][icdl.construct.store] — [`save`][icdl.construct.store.save] / [`load`][icdl.construct.store.load]
  (safetensors + JSON).
"""

from icdl.construct.compile import (
    CompiledModel,
    GDConfig,
    TracePoint,
    build_prompt,
    compile_gd_transformer,
    sample_task,
)
from icdl.construct.contract import Expect
from icdl.construct.layout import Layout, paper_layout
from icdl.construct.store import load, save
from icdl.construct.variants import VARIANTS, Variant, get_variant, register
from icdl.construct.verify import VerifyReport, verify

__all__ = [
    "VARIANTS",
    "CompiledModel",
    "Expect",
    "GDConfig",
    "Layout",
    "TracePoint",
    "Variant",
    "VerifyReport",
    "build_prompt",
    "compile_gd_transformer",
    "get_variant",
    "load",
    "paper_layout",
    "register",
    "sample_task",
    "save",
    "verify",
]
