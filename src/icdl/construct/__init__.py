"""The compiler of Theorem 1, its variants and its verifier (docs/architecture.md has the module map and
the import layers that ``lint-imports`` checks).

* [`layout`][icdl.construct.engine.layout] — named slots of the token (docs/construction.md, "Layout").
* [`tables`][icdl.construct.engine.sublayers], [`layers`][icdl.construct.engine.layers],
  [`ranged`][icdl.construct.engine.row_layers] — the compact sublayers (ReLU/softmax attention, EWML, ReLU
  MLP; the same on token ranges); each describes itself with an
  [`icdl.sublayer.SublayerInfo`][icdl.sublayer.SublayerInfo] derived from its tables.
* [`terms`][icdl.construct.engine.terms] — the sum-of-ReLU terms, conditioned for exact floating point.
* [`context`][icdl.construct.build.context] — [`BuildContext`][icdl.construct.build.context.BuildContext],
  what every builder gets.
* [`blocks`][icdl.construct.build.blocks] — one builder per sublayer role (Lemmas 2-5, (C.16), Proj_W,
  readout) and each role's expected effect.
* [`contract`][icdl.construct.build.contract] — [`Expect`][icdl.construct.build.contract.Expect] (what a
  sublayer must leave in which slot), the verifier's [`Reference`][icdl.construct.build.contract.Reference]
  and [`Variant`][icdl.construct.build.contract.Variant]; [`sizes`][icdl.construct.engine.sizes] — a variant's
  closed-form ``Sizes`` and ``Costs`` (``Variant.sizes``, ``Variant.costs``), read by
  [`estimate`][icdl.construct.estimate] for ``icdl construct``'s budget estimate.
* [`paper`][icdl.construct.variants.paper], [`compact`][icdl.construct.variants.compact],
  [`no_ewml`][icdl.construct.variants.no_ewml], [`rows`][icdl.construct.variants.rows],
  [`softmax`][icdl.construct.variants.softmax] — variants, listed in
  [`variants`][icdl.construct.variants.registry].
* [`ranges`][icdl.construct.bounds.ranges] — a-priori bounds on every argument of the fitted sums and products
  along the GD trajectory of a prompt (``radius="auto"``, ``icdl construct --range auto``).
* [`compile`][icdl.construct.compile] —
  [`compile_gd_transformer`][icdl.construct.compile.compile_gd_transformer],
  [`GDConfig`][icdl.construct.config.GDConfig], [`CompiledModel`][icdl.construct.compile.CompiledModel],
  [`build_prompt`][icdl.construct.compile.build_prompt], [`sample_task`][icdl.construct.task.sample_task].
* [`verify`][icdl.construct.check.verify] — [`verify`][icdl.construct.check.verify] (trace, compare, report)
  against reference GD.
* [`store`][icdl.construct.store] — [`save`][icdl.construct.store.save] / [`load`][icdl.construct.store.load]
  (safetensors + JSON).
"""

from icdl.construct.build.contract import Expect
from icdl.construct.check.verify import VerifyReport, verify
from icdl.construct.compile import (
    CompiledModel,
    GDConfig,
    TracePoint,
    build_prompt,
    compile_gd_transformer,
    sample_task,
)
from icdl.construct.engine.layout import Layout, paper_layout
from icdl.construct.store import load, save
from icdl.construct.variants.registry import VARIANTS, Variant, get_variant, register

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
