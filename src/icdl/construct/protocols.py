"""What the code below the compiler reads of a configuration and of a compiled model, as protocols: the
engine, the a-priori bounds, the contract and the variants are typed against
[`StepConfig`][icdl.construct.protocols.StepConfig] and [`Compiled`][icdl.construct.protocols.Compiled], not
against [`GDConfig`][icdl.construct.config.GDConfig] and
[`CompiledModel`][icdl.construct.compile.CompiledModel], which sit above them (a config is checked against
its variant; a compiled model runs one), so no import, type-only ones included, points up."""

from __future__ import annotations

from dataclasses import Field
from typing import Any, ClassVar, Protocol

import torch

from icdl.construct.engine.terms import SumTerms
from icdl.nets import NetSpec

__all__ = ["Compiled", "StepConfig"]


class StepConfig(Protocol):
    """A GD transformer's configuration as read below the compiler (the fields of
    [`GDConfig`][icdl.construct.config.GDConfig]; a dataclass, so ``dataclasses.replace`` applies)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def spec(self) -> NetSpec: ...
    @property
    def loss(self) -> str: ...
    @property
    def lr(self) -> float: ...
    @property
    def steps(self) -> int: ...
    @property
    def n(self) -> int: ...
    @property
    def eps(self) -> float: ...
    @property
    def radius(self) -> float: ...
    @property
    def delta(self) -> float | None: ...
    @property
    def box(self) -> float | None: ...
    @property
    def gate(self) -> float: ...
    @property
    def variant(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def weight_range(self) -> float | None: ...
    @property
    def auto_range(self) -> bool: ...
    @property
    def projection(self) -> str: ...
    @property
    def torch_dtype(self) -> torch.dtype: ...


class Compiled(Protocol):
    """A compiled GD transformer as read below the compiler (what a variant's declared error budget needs of
    a [`CompiledModel`][icdl.construct.compile.CompiledModel])."""

    @property
    def config(self) -> StepConfig: ...
    @property
    def terms(self) -> SumTerms: ...
    @property
    def spec(self) -> NetSpec: ...
