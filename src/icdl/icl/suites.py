"""Evaluation suites as data: named lists of test conditions derived from a run's training task.

A [`Condition`][icdl.icl.suites.Condition] is a [`icdl.config.TaskConfig`][icdl.config.TaskConfig] (the
training task with some fields changed), the number of points per test prompt and a label; a
[`Suite`][icdl.icl.suites.Suite] is a named list of conditions plus the number of test prompts and the test
seed. Suites serialise to plain dicts (``to_dict`` / ``from_dict``), and the dict is written into every result
file, so a result says exactly which distribution it was measured on (docs/protocol.md: metric,
configurations, open choices; the dtsip "suites as data" anchor).

Suites (``SUITES``; ``E`` = training examples per prompt, test prompts have ``E_test = 1.5 E`` examples,
capped by the model's positions, as the paper's 50 -> 75):

* ``in-distribution`` — the training task, ``E_test`` examples (the paper's curve A).
* ``mixture`` / ``mixture-prompt`` — inputs ``ω1 N(m, I) + (1 - ω1) N(m', I)`` for ω1 in 1, 0.9, 0.7, 0.5,
  with ``m`` the training mean and ``m' = m + 4`` toward the other side of 0 (the paper: -2 and +2); the
  component is drawn per POINT (``mixture``) or once per PROMPT (``mixture-prompt``). The paper does not
  say which; the choice changes the results a lot (docs/protocol.md, pilot findings).
* ``weight-shift`` — target weights ``N(μ, I)`` for μ in 0, -0.5, +0.5, as written in the paper (F.2).
  Degenerate for bias-free ReLU targets on ``N(-2, I)`` inputs (μ = -0.5: almost every label is exactly 0;
  μ = +0.5: the label scale explodes with depth);
  [`icdl.icl.evaluation.evaluate`][icdl.icl.evaluation.evaluate] measures and flags this.
* ``weight-shift-std`` — the same shifts with per-task label standardisation (``standardize: task``),
  a non-degenerate form: R² then measures how well the shape of each network is learned.
* ``long-prompts`` — the training task at ``1 x``, ``1.5 x`` and ``2 x`` the training prompt length (capped
  by the model's positions; duplicates dropped).
* ``centred`` — inputs ``N(0, I)``, labels standardised per task: the trivial predictors (zero, averaging)
  score about 0, so what the model learned about the network itself is what is measured.
* ``depth`` — the in-distribution condition read at ``k = 15, 30, 45`` (scaled down when the test prompt
  is shorter); [`icdl.icl.evaluation.evaluate.depth_sweep`][icdl.icl.evaluation.evaluate.depth_sweep] gathers
  it over runs of 4, 6, 8, 10 layers (F.3).

Test prompts use ``seed`` (default [`EVAL_SEED`][icdl.icl.suites.EVAL_SEED]), which must differ from the run's
training seed; prompts are drawn in batches of 64 (batch ``b`` = ``sample_batch(task, 64, seed=seed,
step=b)``), so every condition of a suite uses the same target networks (the weight stream does not depend on
the inputs).

Usage:

```python
suite = build_suite("mixture", cfg)             # cfg: the run's icdl.config.Config
for cond in suite.conditions: cond.task, cond.points
Suite.from_dict(suite.to_dict()) == suite
```
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from icdl.config import Config, InputConfig, TaskConfig
from icdl.errors import InputError

__all__ = [
    "DEPTH_KS",
    "EVAL_SEED",
    "MIXTURE_WEIGHTS",
    "SUITES",
    "WEIGHT_SHIFTS",
    "Condition",
    "Suite",
    "build_suite",
    "depth_ks",
    "eval_points",
    "suite_names",
]

EVAL_SEED = 987_654_321
"""Default seed of every test set; training seeds are small integers, so the streams never coincide."""

MIXTURE_WEIGHTS: tuple[float, ...] = (1.0, 0.9, 0.7, 0.5)
WEIGHT_SHIFTS: tuple[float, ...] = (0.0, -0.5, 0.5)
DEPTH_KS: tuple[int, ...] = (15, 30, 45)
MIXTURE_GAP = 4.0  # distance between the two mixture components (the paper: -2 and +2)
LONG_FACTORS: tuple[float, ...] = (1.0, 1.5, 2.0)
DEFAULT_PROMPTS = 1280  # 20 batches of 64 (docs/protocol.md, configurations); the paper used 6,400


@dataclass(frozen=True)
class Condition:
    """One test distribution: ``task`` (a full TaskConfig), ``points`` per prompt (examples + query), a
    short ``name`` (a file-name-safe key), a human ``label`` and ``params`` (the varied values, e.g.
    ``{"omega1": 0.9}``)."""

    name: str
    label: str
    task: TaskConfig
    points: int
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def examples(self) -> int:
        """Largest k in a test prompt (``points - 1``)."""
        return self.points - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "points": self.points,
            "params": dict(self.params),
            "task": self.task.model_dump(mode="json"),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Condition:
        try:
            return cls(
                name=str(d["name"]),
                label=str(d["label"]),
                task=TaskConfig.model_validate(d["task"]),
                points=int(d["points"]),
                params=dict(d.get("params", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"malformed suite condition: {' '.join(str(exc).split())}") from None


@dataclass(frozen=True)
class Suite:
    """A named list of conditions evaluated on ``prompts`` test prompts drawn with ``seed``.

    ``train_examples`` is the run's training prompt length (the dashed vertical line of the plots and the
    split of the k ranges); ``ks`` optionally names k values of special interest (the depth sweep);
    ``notes`` are caveats written into the results and the report.
    """

    name: str
    description: str
    conditions: tuple[Condition, ...]
    prompts: int
    seed: int
    train_examples: int
    ks: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "prompts": self.prompts,
            "seed": self.seed,
            "train_examples": self.train_examples,
            "ks": list(self.ks),
            "notes": list(self.notes),
            "conditions": [c.to_dict() for c in self.conditions],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Suite:
        try:
            return cls(
                name=str(d["name"]),
                description=str(d["description"]),
                conditions=tuple(Condition.from_dict(c) for c in d["conditions"]),
                prompts=int(d["prompts"]),
                seed=int(d["seed"]),
                train_examples=int(d["train_examples"]),
                ks=tuple(int(k) for k in d.get("ks", ())),
                notes=tuple(str(n) for n in d.get("notes", ())),
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"malformed suite: {' '.join(str(exc).split())}") from None

    def condition(self, name: str) -> Condition:
        for c in self.conditions:
            if c.name == name:
                return c
        raise InputError(f"suite {self.name!r} has no condition {name!r}")


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def eval_points(cfg: Config, factor: float = 1.5) -> int:
    """Points per test prompt: ``round(factor * E) + 1`` examples + query, capped by ``model.max_points``
    and never below the training length (the paper: 50 -> 75 examples, CPU preset: 30 -> 45)."""
    e = cfg.task.examples
    want = math.floor(factor * e + 0.5) + 1
    return max(min(want, cfg.model.max_points), min(e + 1, cfg.model.max_points))


def depth_ks(max_k: int, ks: tuple[int, ...] = DEPTH_KS) -> tuple[int, ...]:
    """The depth-sweep k values: the paper's 15, 30, 45, scaled by ``max_k / 45`` when the test prompt
    has fewer than 45 examples (at least 1, duplicates dropped)."""
    top = max(ks)
    if max_k >= top:
        return tuple(ks)
    scaled = sorted({max(1, min(max_k, round(k * max_k / top))) for k in ks})
    return tuple(scaled)


def _with(task: TaskConfig, **changes: Any) -> TaskConfig:
    """A validated copy of ``task`` with fields replaced (pydantic re-validates the new values)."""
    data = task.model_dump(mode="json")
    for key, value in changes.items():
        node = data
        parts = key.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value
    try:
        return TaskConfig.model_validate(data)
    except ValueError as exc:
        raise InputError(f"cannot derive the test task: {' '.join(str(exc).split())}") from None


def _base_mean(task: TaskConfig, suite: str) -> float:
    """The training input mean m (one Gaussian component, as the paper's N(-2, I)) in the coordinates the
    model saw (after centring)."""
    ic: InputConfig = task.inputs
    if ic.kind != "gaussian" or len(ic.means) != 1:
        raise InputError(
            f"suite {suite!r} needs a single-Gaussian training input distribution, got {ic.kind} "
            f"with means {ic.means}"
        )
    return ic.means[0] - (ic.population_mean if ic.center else 0.0)


def _tag(x: float) -> str:
    return f"{x:+g}".replace("+", "p").replace("-", "m").replace(".", "_")


# --------------------------------------------------------------------------------------------------
# Suite builders: (cfg) -> (description, conditions, ks, notes)
# --------------------------------------------------------------------------------------------------

Built = tuple[str, list[Condition], tuple[int, ...], tuple[str, ...]]


def _in_distribution(cfg: Config) -> Built:
    n = eval_points(cfg)
    cond = Condition("train", "training distribution", cfg.task, n, {})
    return ("the training task on prompts of 1.5x the training length (the paper's curve A)", [cond], (), ())


def _mixture(per: str) -> Callable[[Config], Built]:
    def build(cfg: Config) -> Built:
        suite = "mixture" if per == "point" else "mixture-prompt"
        m = _base_mean(cfg.task, suite)
        other = m + MIXTURE_GAP if m <= 0 else m - MIXTURE_GAP
        n = eval_points(cfg)
        conds = []
        for w1 in MIXTURE_WEIGHTS:
            inputs = {
                "kind": "gaussian",
                "mean": [m, other],
                "weights": [w1, 1.0 - w1],
                "per": per,
                "std": cfg.task.inputs.std,
                "center": False,
            }
            task = _with(cfg.task, inputs=inputs)
            conds.append(
                Condition(
                    f"w{w1:.1f}".replace(".", "_"),
                    f"ω=({w1:g}, {1 - w1:.1g})",
                    task,
                    n,
                    {"omega1": w1, "means": [m, other], "per": per},
                )
            )
        desc = (
            f"inputs ω1 N({m:g}, I) + (1-ω1) N({other:g}, I), component drawn per {per}, "
            f"ω1 in {', '.join(f'{w:g}' for w in MIXTURE_WEIGHTS)}"
        )
        notes = (
            "The paper does not say whether the mixture component is drawn per point or per prompt; "
            f"this suite draws it per {per} (the other suite: "
            f"{'mixture-prompt' if per == 'point' else 'mixture'}).",
        )
        return desc, conds, (), notes

    return build


def _weight_shift(standardize: bool) -> Callable[[Config], Built]:
    def build(cfg: Config) -> Built:
        n = eval_points(cfg)
        conds = []
        for mu in WEIGHT_SHIFTS:
            changes: dict[str, Any] = {"weight_mean": mu}
            if standardize:
                changes["standardize"] = "task"
            task = _with(cfg.task, **changes)
            label = f"weights N({mu:g}, I)" + (", labels standardised per task" if standardize else "")
            conds.append(Condition(f"mu{_tag(mu)}", label, task, n, {"weight_mean": mu}))
        if standardize:
            desc = "target weights N(μ, I), μ in 0, -0.5, +0.5, labels standardised per task"
            notes = (
                "Each task's labels are standardised with fresh reference inputs (task.standardize=task): "
                "this removes the label-scale blow-up of N(+0.5, I) and makes the shift one of function "
                "SHAPE; trivial baselines score near 0. It cannot revive networks that are constant on the "
                "input distribution (bias-free ReLU nets with N(-0.5, I) weights are dead: their labels stay "
                "exactly 0); the diagnostics flag such conditions as degenerate.",
            )
        else:
            desc = "target weights N(μ, I), μ in 0, -0.5, +0.5, as written in the paper (F.2)"
            notes = (
                "As written, this shift is degenerate for bias-free ReLU targets on N(-2, I) inputs: "
                "with N(-0.5, I) almost every label is exactly 0 and with N(+0.5, I) the label scale "
                "explodes with depth (docs/protocol.md, pilot findings). Conditions flagged 'degenerate' "
                "in the results "
                "are not meaningful; see weight-shift-std for the standardised form.",
            )
        return desc, conds, (), notes

    return build


def _long_prompts(cfg: Config) -> Built:
    conds, seen = [], set()
    for f in LONG_FACTORS:
        n = eval_points(cfg, f)
        if n in seen:
            continue
        seen.add(n)
        conds.append(
            Condition(
                f"x{f:g}".replace(".", "_"),
                f"{n - 1} examples ({f:g}x training)",
                cfg.task,
                n,
                {"factor": f, "examples": n - 1},
            )
        )
    notes: tuple[str, ...] = ()
    if len(conds) < len(LONG_FACTORS):
        notes = (
            f"Prompt lengths are capped by model.max_points = {cfg.model.max_points} (learned positions).",
        )
    return "the training task on prompts of 1x, 1.5x and 2x the training length", conds, (), notes


def _centred(cfg: Config) -> Built:
    inputs = {
        "kind": "gaussian",
        "mean": 0.0,
        "weights": None,
        "per": "point",
        "std": cfg.task.inputs.std,
        "center": False,
    }
    task = _with(cfg.task, inputs=inputs, standardize="task")
    cond = Condition("centred", "inputs N(0, I), labels standardised", task, eval_points(cfg), {})
    notes = (
        "Inputs N(0, I) and per-task standardised labels: the zero and averaging predictors score about 0, "
        "so R² measures what is learned about each network. For a model trained on N(-2, I) this is also a "
        "distribution shift.",
    )
    return "inputs N(0, I), labels standardised per task", [cond], (), notes


def _depth(cfg: Config) -> Built:
    n = eval_points(cfg)
    ks = depth_ks(n - 1)
    cond = Condition("train", "training distribution", cfg.task, n, {})
    desc = f"the training task read at k = {', '.join(map(str, ks))} (transformer-depth sweep, F.3)"
    return desc, [cond], ks, ()


SUITES: dict[str, Callable[[Config], Built]] = {
    "in-distribution": _in_distribution,
    "mixture": _mixture("point"),
    "mixture-prompt": _mixture("prompt"),
    "weight-shift": _weight_shift(False),
    "weight-shift-std": _weight_shift(True),
    "long-prompts": _long_prompts,
    "centred": _centred,
    "depth": _depth,
}


def suite_names() -> list[str]:
    """Names of the suites, in a stable order."""
    return list(SUITES)


def build_suite(name: str, cfg: Config, *, prompts: int | None = None, seed: int = EVAL_SEED) -> Suite:
    """The suite ``name`` for a run with config ``cfg`` (its training task, length and positions).

    Raises [`InputError`][icdl.errors.InputError] for an unknown suite, fewer than 2 prompts, or a test seed
    equal to the run's training seed (test prompts must be fresh).
    """
    if name not in SUITES:
        raise InputError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    prompts = DEFAULT_PROMPTS if prompts is None else prompts
    if not isinstance(prompts, int) or isinstance(prompts, bool) or prompts < 2:
        raise InputError(
            f"--prompts must be an integer >= 2 (R² is computed across prompts), got {prompts!r}"
        )
    if seed == cfg.train.seed:
        raise InputError(f"the test seed ({seed}) equals the run's training seed; choose another --seed")
    desc, conds, ks, notes = SUITES[name](cfg)
    return Suite(name, desc, tuple(conds), prompts, seed, cfg.task.examples, ks, notes)
