"""The compiler of Theorem 1 and its verifier.

* :mod:`~icdl.construct.layout` — named slots of the token (paper-notes §9.2).
* :mod:`~icdl.construct.terms` — the sum-of-ReLU terms, conditioned for exact floating point.
* :mod:`~icdl.construct.blocks` — one builder per sublayer role (Lemmas 2-5, (C.16), Proj_W, readout).
* :mod:`~icdl.construct.paper` / :mod:`~icdl.construct.variants` — the paper's construction and the registry.
* :mod:`~icdl.construct.compile` — :func:`compile_gd_transformer`, :class:`CompiledModel`,
  :func:`build_prompt`, :func:`sample_task`.
* :mod:`~icdl.construct.verify` — :func:`verify` against reference GD, :class:`VerifyReport`.
* :mod:`~icdl.construct.store` — :func:`save` / :func:`load` (safetensors + JSON).
"""

from icdl.construct.compile import (
    CompiledModel,
    GDConfig,
    build_prompt,
    compile_config,
    compile_gd_transformer,
    sample_task,
)
from icdl.construct.layout import Layout, paper_layout
from icdl.construct.store import load, save
from icdl.construct.variants import VARIANTS, Variant, get_variant
from icdl.construct.verify import VerifyReport, verify

__all__ = [
    "VARIANTS",
    "CompiledModel",
    "GDConfig",
    "Layout",
    "Variant",
    "VerifyReport",
    "build_prompt",
    "compile_config",
    "compile_gd_transformer",
    "get_variant",
    "load",
    "paper_layout",
    "sample_task",
    "save",
    "verify",
]
