"""The compiler of Theorem 1, its variants and its verifier (docs/architecture.md has the map of the
subpackages and the import layers that ``lint-imports`` checks).

* [`compile`][icdl.construct.compile] —
  [`compile_gd_transformer`][icdl.construct.compile.compile_gd_transformer],
  [`CompiledModel`][icdl.construct.compile.CompiledModel]; [`config`][icdl.construct.config] —
  [`GDConfig`][icdl.construct.config.GDConfig]; [`task`][icdl.construct.task] —
  [`sample_task`][icdl.construct.task.sample_task]; [`store`][icdl.construct.store] —
  [`save`][icdl.construct.store.save] / [`load`][icdl.construct.store.load] (safetensors + JSON);
  [`estimate`][icdl.construct.estimate] — ``icdl construct``'s budget estimate.
* [`check`][icdl.construct.check] — the verifier: [`verify`][icdl.construct.check.verify.verify] (trace,
  compare against reference GD, report).
* [`variants`][icdl.construct.variants] — the registry and one module per construction.
* [`build`][icdl.construct.build] — the contract every variant builds with
  ([`Expect`][icdl.construct.build.contract.Expect], [`Variant`][icdl.construct.build.contract.Variant],
  [`BuildContext`][icdl.construct.build.context.BuildContext], the block builders, the prompt).
* [`bounds`][icdl.construct.bounds] — a-priori bounds: the error budget, ``radius="auto"``'s ranges.
* [`engine`][icdl.construct.engine] — the sublayers and their tables, kernels, the token layout, the
  conditioned ReLU sums, products, closed-form sizes; [`protocols`][icdl.construct.protocols] — what the
  layers below the compiler read of a configuration and a compiled model.
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
