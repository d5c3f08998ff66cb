"""Typed run configuration: task, ICL model and training, loaded from YAML presets with overrides.

A run is described by one [`Config`][icdl.config.Config] (pydantic v2, ``extra="forbid"``): a
[`TaskConfig`][icdl.config.TaskConfig] (the prompt distribution), a [`ModelConfig`][icdl.config.ModelConfig]
(the ICL transformer; both as in docs/protocol.md) and a [`TrainConfig`][icdl.config.TrainConfig] (optimiser,
schedule, checkpoints). Presets live in ``src/icdl/configs/*.yaml`` and are loaded by name (``cpu-small``) or
by path; ``key=value`` overrides use dotted keys and YAML scalars (``train.steps=500``,
``model.attention=softmax``, ``task.inputs.mean=[-2, 2]``).

Types are strict (docs/reliability.md): an integer setting takes an integer (not ``true``, not ``"3"``), a
boolean takes ``true``/``false`` (not ``1``), a float takes a number; a key written twice in one YAML
mapping is an error naming the key and its line. Every user mistake — unknown key, bad value, unknown
preset, duplicate key — raises [`icdl.errors.InputError`][icdl.errors.InputError]
with a one-line message, before anything is written to disk.

Usage:

```python
cfg = load_config("cpu-small", ["train.steps=100", "model.attention=softmax"])
cfg.task.depth, cfg.model.d_model, cfg.train.lr
```
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from icdl.errors import InputError
from icdl.yaml_input import ConfigLoader, read_yaml

__all__ = [
    "Config",
    "CurriculumConfig",
    "InputConfig",
    "ModelConfig",
    "RampConfig",
    "RunConfig",
    "StrictConfig",
    "TaskConfig",
    "TrainConfig",
    "apply_overrides",
    "config_diff",
    "dump_config",
    "list_presets",
    "load_config",
    "load_config_data",
    "parse_overrides",
    "preset_path",
    "validate_as",
]


class StrictConfig(BaseModel):
    """Base of every config section: unknown keys, NaN/inf values and coerced types are errors."""

    # allow_inf_nan=False: no float setting is meaningful as NaN or infinity (one line, exit 2).
    # strict=True: no silent coercion (YAML's `yes` is True, and True must not train 1 layer; "3" is not 3);
    # a float field still takes an integer.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)


ConfigT = TypeVar("ConfigT", bound=BaseModel)


class RunConfig(Protocol):
    """What the shared run machinery (checkpoints, resume, logging:
    [`icdl.icl.training.checkpoint`][icdl.icl.training.checkpoint]) needs of a run's config: a
    [`Config`][icdl.config.Config] or a score run's [`ScoreConfig`][icdl.diffusion.config.ScoreConfig]."""

    @property
    def train(self) -> TrainConfig: ...

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]: ...


# --------------------------------------------------------------------------------------------------
# Task: the prompt distribution
# --------------------------------------------------------------------------------------------------


class InputConfig(StrictConfig):
    """Distribution of the prompt inputs x in R^d.

    ``gaussian``: a mixture ``sum_k weights[k] N(mean[k] * 1, std^2 I)``; a scalar ``mean`` is the
    one-component case (the paper's pretraining inputs are ``N(-2 * 1, I)``). The component is drawn
    independently for every point (``per: point``, the paper's reading, docs/protocol.md, task) or once per
    prompt (``per: prompt``). ``uniform``: i.i.d. coordinates ``U(low, high)``. With ``center`` the
    population mean ``E[x]`` is subtracted from every input (the network and the transformer then see
    the centred x).
    """

    kind: Literal["gaussian", "uniform"] = "gaussian"
    mean: float | list[float] = -2.0
    weights: list[float] | None = None
    per: Literal["point", "prompt"] = "point"
    std: float = Field(1.0, gt=0)
    low: float = -1.0
    high: float = 1.0
    center: bool = False

    @model_validator(mode="after")
    def _check(self) -> InputConfig:
        means = self.means
        if not means:
            raise ValueError("inputs.mean must not be an empty list")
        if not all(math.isfinite(m) for m in means):
            raise ValueError("inputs.mean must be finite")
        if self.weights is not None:
            if len(self.weights) != len(means):
                raise ValueError(
                    f"inputs.weights has {len(self.weights)} entries but inputs.mean has {len(means)}"
                )
            if any(w < 0 for w in self.weights) or abs(sum(self.weights) - 1.0) > 1e-6:
                raise ValueError("inputs.weights must be non-negative and sum to 1")
        if self.kind == "uniform" and not self.low < self.high:
            raise ValueError(f"inputs.low ({self.low}) must be < inputs.high ({self.high})")
        return self

    @property
    def means(self) -> list[float]:
        """Component means as a list (one entry for a plain Gaussian)."""
        return [float(self.mean)] if isinstance(self.mean, (int, float)) else [float(m) for m in self.mean]

    @property
    def mixture_weights(self) -> list[float]:
        """Component weights (uniform when ``weights`` is not given)."""
        k = len(self.means)
        return list(self.weights) if self.weights is not None else [1.0 / k] * k

    @property
    def population_mean(self) -> float:
        """``E[x_c]`` of every coordinate (before centring)."""
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        return sum(w * m for w, m in zip(self.mixture_weights, self.means, strict=True))


class TaskConfig(StrictConfig):
    """Random N-layer network tasks (docs/protocol.md): ``y = f(w, x) + noise``, a fresh ``w`` per prompt.

    The network is [`icdl.nets.NetSpec`][icdl.nets.NetSpec] ``(depth, width, dim, out_dim, activation,
    output)``, bias-free; its weights are i.i.d. ``N(weight_mean, weight_std^2)``, multiplied by
    ``sqrt(2/fan_in)`` per layer when ``fan_in_scaling`` (He). A prompt has ``examples`` in-context pairs plus
    one query, i.e. ``examples + 1`` points. ``standardize: task`` rescales each task's labels to mean 0 and
    variance 1 using ``standardize_points`` fresh reference inputs from the same input distribution
    (never the prompt's own points, so no position sees statistics of later labels).
    """

    kind: Literal["network"] = "network"
    dim: int = Field(20, ge=1)
    out_dim: int = Field(1, ge=1)
    depth: int = Field(6, ge=2)
    width: int = Field(64, ge=1)
    activation: str = "relu"
    output: Literal["linear", "same"] = "linear"
    weight_mean: float = 0.0
    weight_std: float = Field(1.0, ge=0)
    fan_in_scaling: bool = True
    inputs: InputConfig = Field(default_factory=InputConfig)
    standardize: Literal["none", "task"] = "none"
    standardize_points: int = Field(256, ge=2)
    noise_std: float = Field(0.0, ge=0)
    examples: int = Field(30, ge=0)

    @model_validator(mode="after")
    def _check(self) -> TaskConfig:
        # Imported here: icdl.nets imports torch, and the CLI reads suite and preset names from modules that
        # import this one before printing --help (which must not wait for torch).
        from icdl.nets import ACTIVATIONS

        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown task.activation {self.activation!r}; choose one of {', '.join(ACTIVATIONS)}"
            )
        return self

    @property
    def points(self) -> int:
        """Points per training prompt: ``examples`` in-context pairs plus the query."""
        return self.examples + 1


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------


class ModelConfig(StrictConfig):
    """The ICL transformer (a GPT-2-style pre-LN decoder over interleaved x/y tokens, docs/protocol.md).

    ``relu_norm`` is the normaliser of ReLU attention: ``causal`` divides row i by its number of visible
    keys i+1, ``length`` by the sequence length T (the paper's ``sigma/n``, Definition 7).
    ``max_points`` bounds the prompt length (in points; the model has ``2 * max_points`` learned
    positions) and must cover the longest test prompt. ``positions: none`` drops the position table
    (a causal decoder can still tell order; a learned x/y token-type embedding marks the two kinds of
    token), so no position is ever untrained — one answer to the long-prompt question of
    docs/evaluation.md.

    ``loops``: a looped transformer (Yang et al., ICLR 2024): the ``layers`` blocks are ONE weight-tied
    unit applied ``loops`` times, the embedded prompt added to the residual stream before each pass
    (input injection); the parameter count does not depend on ``loops``, and the same weights run at
    any loop count at test time. Training averages the loss over the predictions of the last
    ``loop_window`` passes (default: every pass), the earlier passes without gradients;
    ``train.curriculum.loops`` ramps the loop count.
    """

    attention: Literal["softmax", "relu"] = "relu"
    relu_norm: Literal["causal", "length"] = "causal"
    layers: int = Field(4, ge=1)
    heads: int = Field(4, ge=1)
    d_model: int = Field(64, ge=1)
    d_mlp: int = Field(256, ge=1)
    max_points: int = Field(101, ge=1)
    positions: Literal["learned", "none"] = "learned"
    dropout: float = Field(0.0, ge=0, lt=1)
    loops: int | None = Field(None, ge=1)
    loop_window: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if self.d_model % self.heads:
            raise ValueError(f"model.heads ({self.heads}) must divide model.d_model ({self.d_model})")
        if self.loop_window is not None and self.loops is None:
            raise ValueError("model.loop_window needs model.loops (a looped model)")
        if self.loop_window is not None and self.loops is not None and self.loop_window > self.loops:
            raise ValueError(f"model.loop_window ({self.loop_window}) exceeds model.loops ({self.loops})")
        return self

    def window(self, loops: int) -> int:
        """The passes a looped model's loss averages over when it runs ``loops`` of them: the last
        ``loop_window`` (all by default), at most ``loops``."""
        return min(self.loop_window or loops, loops)


# --------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------


class RampConfig(StrictConfig):
    """A Garg-style curriculum ramp: the value starts at ``start`` and grows by ``inc`` every
    ``interval`` steps until it reaches ``end``."""

    start: int = Field(ge=1)
    end: int = Field(ge=1)
    inc: int = Field(1, ge=1)
    interval: int = Field(2000, ge=1)

    @model_validator(mode="after")
    def _check(self) -> RampConfig:
        if self.start > self.end:
            raise ValueError(f"curriculum start ({self.start}) must be <= end ({self.end})")
        return self

    def value(self, step: int) -> int:
        """The ramp's value at 0-based ``step``."""
        return min(self.end, self.start + self.inc * (step // self.interval))


class CurriculumConfig(StrictConfig):
    """Optional curriculum (Garg et al.): ``dims`` active input dimensions (the rest are zeroed) and
    ``points`` points per prompt; ``loops`` the passes of a looped model (Yang et al.; it must end at
    ``model.loops``). ``null`` disables a ramp."""

    dims: RampConfig | None = None
    points: RampConfig | None = None
    loops: RampConfig | None = None


class TrainConfig(StrictConfig):
    """Optimiser, schedule and bookkeeping.

    ``batch_size`` is the GLOBAL batch (split evenly across data-parallel ranks). The learning rate
    warms up linearly over ``warmup`` steps, then stays constant or follows a cosine down to
    ``lr * min_lr_ratio``. ``precision: auto`` is float32 on CPU and bf16 autocast on CUDA.
    """

    steps: int = Field(3000, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup: int = Field(200, ge=0)
    schedule: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.999, ge=0, lt=1)
    grad_clip: float | None = Field(1.0, gt=0)
    seed: int = Field(0, ge=0, le=2**63 - 1)  # torch seeds are 64-bit
    checkpoint_every: int = Field(500, ge=1)
    keep_checkpoints: int = Field(1, ge=1)
    log_every: int = Field(10, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    compile: bool = False
    cuda_graph: bool = False
    points_max: int | None = Field(None, ge=1)
    threads: int | None = Field(None, ge=1, le=4096)
    tensorboard: bool = False
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if not math.isfinite(self.lr):
            raise ValueError("train.lr must be finite")
        return self


class Config(StrictConfig):
    """A complete run: ``name`` (the preset or file stem; default run directory ``runs/<name>``),
    ``task``, ``model`` and ``train``."""

    name: str = "run"
    task: TaskConfig = Field(default_factory=TaskConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)

    @model_validator(mode="after")
    def _check(self) -> Config:
        cur = self.train.curriculum
        longest = max(self.task.points, cur.points.end if cur.points else 0, self.train.points_max or 0)
        if longest > self.model.max_points:
            raise ValueError(
                f"prompts have up to {longest} points but model.max_points is {self.model.max_points}"
            )
        pm = self.train.points_max
        if pm is not None and pm < max(self.task.points, cur.points.end if cur.points else 0):
            raise ValueError(
                f"train.points_max ({pm}) is below the task's prompt length; it must be at least "
                f"{max(self.task.points, cur.points.end if cur.points else 0)}"
            )
        if cur.dims and cur.dims.end > self.task.dim:
            raise ValueError(f"curriculum dims end ({cur.dims.end}) exceeds task.dim ({self.task.dim})")
        if cur.loops is not None:
            if self.model.loops is None:
                raise ValueError("train.curriculum.loops needs a looped model (model.loops)")
            if cur.loops.end != self.model.loops:
                raise ValueError(
                    f"train.curriculum.loops ends at {cur.loops.end} but model.loops is {self.model.loops}; "
                    "the ramp must end at the model's loop count"
                )
            if self.train.cuda_graph:
                raise ValueError("train.cuda_graph needs a fixed loop count; drop train.curriculum.loops")
        return self


# --------------------------------------------------------------------------------------------------
# Loading, overrides, dumping
# --------------------------------------------------------------------------------------------------

# Keys that may differ between a saved run and the config used to resume it: they change bookkeeping,
# not the trajectory. (``train.steps`` may grow too, unless the cosine schedule depends on it.)
RESUMABLE_KEYS = frozenset(
    {
        "train.checkpoint_every",
        "train.keep_checkpoints",
        "train.log_every",
        "train.tensorboard",
        "train.threads",
    }
)


def _presets_dir(folder: str = "") -> Path:
    base = resources.files("icdl") / "configs"
    return Path(str(base / folder if folder else base))


def list_presets(folder: str = "") -> list[str]:
    """Names of the bundled presets (``src/icdl/configs/<folder>/*.yaml``; ``folder`` "" for
    ``icdl train``'s, "score" for ``icdl score``'s)."""
    return sorted(p.stem for p in _presets_dir(folder).glob("*.yaml"))


def preset_path(name_or_path: str | Path, folder: str = "") -> Path:
    """Resolve a preset name (``cpu-small``) or a YAML path to a file; unknown names are an InputError."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise InputError(f"config file {str(p)!r} not found")
        return p
    candidate = _presets_dir(folder) / f"{p.name}.yaml"
    if candidate.is_file() and str(p) == p.name:
        return candidate
    kind = f"{folder} preset" if folder else "preset"
    names = ", ".join(list_presets(folder))
    raise InputError(f"unknown {kind} {str(name_or_path)!r}; choose one of {names} or a YAML path")


def _config_keys(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Every dotted key of the config schema (``train.steps``, ``task.inputs.mean``, ...)."""
    model = model or Config
    keys: list[str] = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        for arg in (field.annotation, *get_args(field.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                keys += _config_keys(arg, f"{prefix}{name}.")
    return keys


def suggest_key(key: str, schema: type[BaseModel] | None = None) -> str | None:
    """The known key of ``schema`` (default [`Config`][icdl.config.Config]) closest to ``key`` (difflib), or
    None: ``train.step`` -> ``train.steps``."""
    import difflib

    keys = _config_keys(schema)
    leaf = key.rpartition(".")[2]
    same_leaf = [k for k in keys if k.rpartition(".")[2] == leaf]
    if len(same_leaf) == 1:  # the right key in the wrong section: model.lr -> train.lr
        return same_leaf[0]
    parent = key.rpartition(".")[0]
    siblings = [k for k in keys if k.rpartition(".")[0] == parent]
    for pool in (siblings, keys):
        match = difflib.get_close_matches(key, pool, n=1, cutoff=0.6)
        if match:
            return match[0]
    return None


def _shown(value: Any) -> str:
    """A short rendering of a rejected value: its repr and, for a bool or a string, what it is."""
    text = repr(value)[:60]
    if isinstance(value, bool):
        return f"{text}: a boolean; YAML reads yes/no/on/off as booleans"
    return f"{text}: a string" if isinstance(value, str) else text


def _format_validation_error(exc: ValidationError, schema: type[BaseModel], what: str) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
            near = suggest_key(loc, schema)
            if near is not None:
                msg += f" (did you mean {near!r}?)"
        if err["type"].endswith("_type") and "input" in err:
            msg += f" (got {_shown(err['input'])})"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return f"invalid {what}: " + "; ".join(parts)


def validate_as(schema: type[ConfigT], data: dict[str, Any], what: str = "config") -> ConfigT:
    """Build a ``schema`` instance from a plain dict, turning validation errors into one-line InputErrors
    (unknown keys get the nearest known key as a suggestion)."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise InputError(_format_validation_error(exc, schema, what)) from None


def validate(data: dict[str, Any]) -> Config:
    """Build a [`Config`][icdl.config.Config] from a plain dict, turning validation errors into one-line
    InputErrors."""
    return validate_as(Config, data)


def parse_overrides(items: list[str] | tuple[str, ...]) -> list[tuple[str, Any]]:
    """Parse ``key=value`` strings; values are YAML scalars or flow collections (``true``, ``[1, 2]``)."""
    out = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise InputError(f"override {item!r} must look like section.key=value")
        try:
            value = yaml.load(raw, Loader=ConfigLoader) if raw.strip() else None  # a SafeLoader
        except yaml.YAMLError:
            raise InputError(f"override {item!r}: value is not valid YAML") from None
        out.append((key, value))
    return out


def apply_overrides(data: dict[str, Any], overrides: list[tuple[str, Any]]) -> dict[str, Any]:
    """Set dotted keys in a nested dict (a copy). Only the last path component may be new — pydantic
    then rejects it if it is not a field, so typos never pass silently."""
    import copy

    data = copy.deepcopy(data)
    for key, value in overrides:
        node: Any = data
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            if not isinstance(node, dict):
                raise InputError(f"override {key!r}: {'.'.join(parts[:i])} is not a section")
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
        if not isinstance(node, dict):
            raise InputError(f"override {key!r}: {'.'.join(parts[:-1])} is not a section")
        node[parts[-1]] = value
    return data


def load_config(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load a preset (by name or path), apply ``key=value`` overrides and validate.

    ``name`` defaults to the preset name / file stem. Raises InputError on any problem.
    """
    return validate(load_config_data(preset_path(name_or_path), overrides))


def load_config_data(path: Path, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A config file as a dict (``name`` defaulting to its stem) with ``key=value`` overrides applied,
    not yet validated. An unreadable, invalid, empty or non-mapping file is a one-line InputError."""
    data = read_yaml(path, what="config")
    if data is None:
        # An empty file is almost always a mistake (a failed copy, a wrong path); never run on defaults.
        raise InputError(f"config {str(path)!r} is empty; give at least one section (task, model, train)")
    if not isinstance(data, dict):
        raise InputError(f"config {str(path)!r} must be a mapping at top level")
    data.setdefault("name", path.stem)
    return apply_overrides(data, parse_overrides(overrides))


def dump_config(cfg: Config) -> str:
    """The resolved config as YAML (every field, defaults included)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def config_diff(a: RunConfig, b: RunConfig) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two configs: ``{key: (a_value, b_value)}``."""
    fa, fb = _flatten(a.model_dump(mode="json")), _flatten(b.model_dump(mode="json"))
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}
