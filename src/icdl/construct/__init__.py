"""The compiler of Theorem 1 and its verifier.

* :mod:`~icdl.construct.layout` — named slots of the token (paper-notes §9.2).
* :mod:`~icdl.construct.terms` — the sum-of-ReLU terms, conditioned for exact floating point.
* :mod:`~icdl.construct.blocks` — one builder per sublayer role (Lemmas 2-5, (C.16), Proj_W, readout).
* :mod:`~icdl.construct.paper` / :mod:`~icdl.construct.variants` — the paper's construction and the registry.
* :mod:`~icdl.construct.compile` — :func:`compile_gd_transformer`, :class:`CompiledModel`, :func:`build_prompt`.
* :mod:`~icdl.construct.verify` — :func:`verify` against reference GD, :class:`VerifyReport`.
* :mod:`~icdl.construct.store` — :func:`save` / :func:`load` (safetensors + JSON).
"""

from icdl.construct.compile import CompiledModel, GDConfig, build_prompt, compile_config, compile_gd_transformer
from icdl.construct.layout import Layout, paper_layout
from icdl.construct.variants import VARIANTS, Variant, get_variant

__all__ = [
    "VARIANTS",
    "CompiledModel",
    "GDConfig",
    "Layout",
    "Variant",
    "build_prompt",
    "compile_config",
    "compile_gd_transformer",
    "get_variant",
    "paper_layout",
]
