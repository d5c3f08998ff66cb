"""Typed configuration of an in-context score-estimation run: task, ICL model and training.

A score run reuses the ICL model and trainer settings of [`icdl.config`][icdl.config]
([`ModelConfig`][icdl.config.ModelConfig], [`TrainConfig`][icdl.config.TrainConfig]) with its own task,
[`ScoreTaskConfig`][icdl.diffusion.config.ScoreTaskConfig] (see [`icdl.diffusion.task`][icdl.diffusion.task]).
Presets live in ``src/icdl/configs/score/*.yaml`` (a sub-folder, so ``icdl train`` does not list them);
``key=value`` overrides work as for ``icdl train``. Every user mistake is an
[`InputError`][icdl.errors.InputError].

Usage:

```python
cfg = load_score_config("score-small", ["train.steps=100"])
cfg.task.dim, cfg.task.components, cfg.model.d_model
```
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from icdl.config import (
    ModelConfig,
    StrictConfig,
    TrainConfig,
    list_presets,
    load_config_data,
    preset_path,
    validate_as,
)

__all__ = [
    "ScoreConfig",
    "ScoreTaskConfig",
    "dump_score_config",
    "list_score_presets",
    "load_score_config",
    "validate_score_config",
]


class ScoreTaskConfig(StrictConfig):
    """Per-prompt Gaussian mixtures on a random ``latent_dim``-dimensional subspace of ``R^dim``.

    Every prompt draws its own data distribution (Chen et al. 2023's low-dimensional setting): an
    orthonormal basis ``U`` of a random ``latent_dim``-subspace, ``components`` means ``N(0,
    mean_scale^2 I)`` in latent coordinates, mixture weights ``Dirichlet(weight_concentration)`` (uniform
    when ``weight_concentration`` is null), and one isotropic latent std ``component_std``. Points are
    diffused by the Ornstein-Uhlenbeck process to a time ``t`` drawn per point from ``[t_min, t_max]``
    (``uniform`` or ``log_uniform`` in t). A prompt has ``examples`` in-context pairs plus one query.
    """

    kind: Literal["score"] = "score"
    dim: int = Field(2, ge=1)
    latent_dim: int = Field(2, ge=1)
    components: int = Field(3, ge=1)
    mean_scale: float = Field(1.5, ge=0)
    component_std: float = Field(0.3, gt=0)
    weight_concentration: float | None = Field(None, gt=0)
    t_min: float = Field(0.05, gt=0)
    t_max: float = Field(4.0, gt=0)
    t_sampling: Literal["uniform", "log_uniform"] = "log_uniform"
    examples: int = Field(40, ge=0)

    @model_validator(mode="after")
    def _check(self) -> ScoreTaskConfig:
        if self.latent_dim > self.dim:
            raise ValueError(f"task.latent_dim ({self.latent_dim}) must be <= task.dim ({self.dim})")
        if not self.t_min < self.t_max or not math.isfinite(self.t_max):
            raise ValueError(f"task.t_min ({self.t_min}) must be < task.t_max ({self.t_max}), both finite")
        return self

    @property
    def points(self) -> int:
        """Points per training prompt: ``examples`` in-context pairs plus the query."""
        return self.examples + 1

    @property
    def d_x(self) -> int:
        """Model input size: ``x_t`` and ``t``."""
        return self.dim + 1

    @property
    def d_y(self) -> int:
        """Model output size: the score ``∇ log p_t(x_t)`` in ``R^dim``."""
        return self.dim


class ScoreConfig(StrictConfig):
    """A complete score run: ``name``, ``task`` ([`ScoreTaskConfig`][icdl.diffusion.config.ScoreTaskConfig]),
    ``model``, ``train``.

    ``train.curriculum`` is not supported (a one-line error if set).
    """

    name: str = "score"
    task: ScoreTaskConfig = Field(default_factory=ScoreTaskConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)

    @model_validator(mode="after")
    def _check(self) -> ScoreConfig:
        if self.task.points > self.model.max_points:
            raise ValueError(
                f"prompts have {self.task.points} points but model.max_points is {self.model.max_points}"
            )
        cur = self.train.curriculum
        if cur.dims is not None or cur.points is not None:
            raise ValueError("train.curriculum is not supported for score runs")
        return self


def list_score_presets() -> list[str]:
    """Names of the bundled score presets (``src/icdl/configs/score/*.yaml``)."""
    return list_presets("score")


def validate_score_config(data: dict[str, Any]) -> ScoreConfig:
    """Build a [`ScoreConfig`][icdl.diffusion.config.ScoreConfig] from a dict; validation errors become
    one-line InputErrors."""
    return validate_as(ScoreConfig, data, "score config")


def load_score_config(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ScoreConfig:
    """Load a score preset (by name) or YAML file, apply ``key=value`` overrides and validate (the same
    file checks as [`icdl.config.load_config`][icdl.config.load_config])."""
    return validate_score_config(load_config_data(preset_path(name_or_path, "score"), overrides))


def dump_score_config(cfg: ScoreConfig) -> str:
    """The resolved config as YAML (every field)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
