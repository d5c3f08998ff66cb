"""The compiler of Theorem 1, its variants and its verifier (docs/architecture.md has the module map and
the import layers that ``lint-imports`` checks).

* :mod:`~icdl.construct.layout` — named slots of the token (docs/construction.md, "Layout").
* :mod:`~icdl.construct.tables`, :mod:`~icdl.construct.layers`, :mod:`~icdl.construct.ranged` — the
  compact sublayers (ReLU/softmax attention, EWML, ReLU MLP; the same on token ranges); each describes
  itself with an :class:`icdl.sublayer.SublayerInfo` derived from its tables.
* :mod:`~icdl.construct.terms` — the sum-of-ReLU terms, conditioned for exact floating point.
* :mod:`~icdl.construct.context` — :class:`~icdl.construct.context.BuildContext`, what every builder gets.
* :mod:`~icdl.construct.blocks` — one builder per sublayer role (Lemmas 2-5, (C.16), Proj_W, readout) and
  each role's expected effect.
* :mod:`~icdl.construct.contract` — :class:`Expect` (what a sublayer must leave in which slot), the
  verifier's :class:`~icdl.construct.contract.Reference` and :class:`Variant`;
  :mod:`~icdl.construct.sizes` — a variant's closed-form ``Sizes`` and ``Costs`` (``Variant.sizes``,
  ``Variant.costs``), read by :mod:`~icdl.construct.estimate` for ``icdl construct``'s budget estimate.
* :mod:`~icdl.construct.paper`, :mod:`~icdl.construct.compact`, :mod:`~icdl.construct.no_ewml`,
  :mod:`~icdl.construct.rows`, :mod:`~icdl.construct.softmax` — variants, listed in
  :mod:`~icdl.construct.variants`.
* :mod:`~icdl.construct.compile` — :func:`compile_gd_transformer`, :class:`GDConfig`, :class:`CompiledModel`,
  :func:`build_prompt`, :func:`sample_task`.
* :mod:`~icdl.construct.verify` — :func:`verify` (trace, compare, report) against reference GD.
* :mod:`~icdl.construct.store` — :func:`save` / :func:`load` (safetensors + JSON).
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
