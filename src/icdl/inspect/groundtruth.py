"""A distribution of labelled ground-truth models: compiled GD transformers drawn from a stated prior, each
saved with its ledger ([`icdl.inspect.ledger`][icdl.inspect.ledger]) and a small set of clean and
label-flipped prompts, so that a circuit-discovery method can be scored across many models (as an
estimator, not on one example).

```python
from icdl.inspect.groundtruth import Prior, write, load

write("gt", count=100, seed=0)                 # or: icdl groundtruth --count 100 --seed 0 --out gt
for item in load("gt"):
    item.model, item.ledger, item.prompts["H"], item.prompts["H_corrupt"]
```

Each model ``gt/model_0007/`` holds ``model/`` (the compiled model,
[`icdl.construct.store`][icdl.construct.store]), ``ledger.json``, ``prompts.safetensors`` (``x, y, x_query,
w0`` and the prompts ``H``, ``H_corrupt`` with ``y -> -y``, one row per prompt) and ``card.json`` (what was
drawn). ``gt/index.json`` lists them with the prior and seed; a second ``write`` with the same prior and seed
goes on where the first stopped, model by model (each is written atomically).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from icdl.construct.compile import CompiledModel, compile_gd_transformer
from icdl.construct.store import load as load_model
from icdl.construct.store import save as save_model
from icdl.construct.task import sample_task_info
from icdl.construct.variants.registry import get_variant
from icdl.errors import InputError
from icdl.inspect.ledger import ledger
from icdl.io import atomic_dir, atomic_write_json, read_json
from icdl.nets import NetSpec, gradient

__all__ = ["FORMAT", "GroundTruth", "Prior", "draw", "load", "write"]

FORMAT = "icdl-groundtruth/1"


@dataclass(frozen=True)
class Prior:
    """Where the models are drawn from: each field a choice, drawn uniformly (ranges inclusive).

    A variant that builds only ReLU networks (``no-ewml``) draws ``relu`` whatever ``activations`` says.
    """

    variants: tuple[str, ...] = ("paper", "compact", "no-ewml", "rows", "softmax")
    depth: tuple[int, int] = (2, 4)
    width: tuple[int, int] = (1, 3)
    in_dim: tuple[int, int] = (1, 3)
    activations: tuple[str, ...] = ("relu", "relu", "sigmoid", "tanh")
    steps: tuple[int, int] = (1, 3)
    examples: tuple[int, int] = (3, 8)
    lrs: tuple[float, ...] = (0.05, 0.1, 0.2)
    prompts: int = 4

    def __post_init__(self) -> None:
        for name in ("depth", "width", "in_dim", "steps", "examples"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise InputError(f"prior {name} must be a range 1 <= low <= high, got {(lo, hi)}")
        if self.depth[0] < 2:
            raise InputError(f"prior depth must start at 2 or more (N >= 2), got {self.depth}")
        if not self.variants or not self.activations or not self.lrs or self.prompts < 1:
            raise InputError("prior variants, activations and lrs must be non-empty and prompts >= 1")
        for v in self.variants:
            get_variant(v)  # an unknown name is one line naming the known ones

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


@dataclass
class GroundTruth:
    """One labelled model: its card (what was drawn), the model, its ledger and its prompts."""

    name: str
    card: dict[str, Any]
    model: CompiledModel
    ledger: dict[str, Any]
    prompts: dict[str, Tensor] = field(repr=False)


def _card(prior: Prior, rng: random.Random) -> dict[str, Any]:
    variant = rng.choice(prior.variants)
    activation = rng.choice(prior.activations)
    if variant == "no-ewml":
        activation = "relu"
    return {
        "variant": variant,
        "depth": rng.randint(*prior.depth),
        "width": rng.randint(*prior.width),
        "in_dim": rng.randint(*prior.in_dim),
        "out_dim": 1,
        "activation": activation,
        "steps": rng.randint(*prior.steps),
        "n": rng.randint(*prior.examples),
        "lr": rng.choice(prior.lrs),
        "seed": rng.randrange(2**31),
    }


def _prompts(spec: NetSpec, card: dict[str, Any], count: int) -> dict[str, Tensor]:
    """``count`` non-degenerate prompts on which flipping the labels changes the first GD step (a ReLU
    network can be blind to it: where its output unit is off, ``u`` never reaches the gradient)."""
    rows: dict[str, list[Tensor]] = {k: [] for k in ("x", "y", "x_query", "w0")}
    for j in range(MAX_CARDS * count):
        if len(rows["x"]) == count:
            break
        t = sample_task_info(spec, card["n"], seed=card["seed"] + j, lr=card["lr"], steps=card["steps"])
        flipped = gradient(spec, "squared", t.w0, t.x, t.y) - gradient(spec, "squared", t.w0, t.x, -t.y)
        if float(flipped.abs().max()) <= 1e-9:
            continue
        for key, v in zip(rows, (t.x, t.y, t.x_query, t.w0), strict=True):
            rows[key].append(v)
    if len(rows["x"]) < count:
        raise InputError(f"no {count} prompts whose label flip moves the first GD step")
    return {k: torch.stack(v) for k, v in rows.items()}


MAX_CARDS = 50
"""Cards drawn for one model before giving up: a card whose network gives only degenerate tasks (a
width-1 ReLU network is often dead on every input) is replaced by the next draw."""


def draw(prior: Prior, seed: int, index: int) -> tuple[dict[str, Any], CompiledModel, dict[str, Tensor]]:
    """Model ``index`` of the set drawn with ``seed``: ``(card, model, prompts)``; the same arguments give
    the same model and prompts. Prompts are non-degenerate (labels not all equal; GD moves ``w0``; flipping
    the labels changes the first step): a card without enough of them is replaced by the next
    (``card["redraws"]`` counts them)."""
    rng = random.Random(f"{seed}:{index}")
    for redraws in range(MAX_CARDS):
        card = {**_card(prior, rng), "redraws": redraws}
        spec = NetSpec(card["depth"], card["width"], card["in_dim"], card["out_dim"], card["activation"])
        try:
            p = _prompts(spec, card, prior.prompts)
        except InputError:
            continue
        model = compile_gd_transformer(
            spec, lr=card["lr"], steps=card["steps"], n=card["n"], variant=card["variant"]
        )
        p["H"] = model.build_prompt(p["x"], p["y"], p["x_query"], p["w0"])
        p["H_corrupt"] = model.build_prompt(p["x"], -p["y"], p["x_query"], p["w0"])
        return card, model, p
    raise InputError(f"no card of this prior gives non-degenerate tasks in {MAX_CARDS} draws")


def _name(i: int) -> str:
    return f"model_{i:04d}"


def write(
    out: str | Path,
    count: int,
    seed: int = 0,
    prior: Prior | None = None,
    *,
    progress: Callable[[Iterator[int], int], Iterator[int]] | None = None,
) -> Path:
    """Draw ``count`` models with ``seed`` from ``prior`` (default
    [`Prior`][icdl.inspect.groundtruth.Prior]()) into ``out`` (module docstring); returns
    ``out/index.json``. A directory holding another prior or seed is refused; one holding the same goes on
    where it stopped. ``progress(iterable, total)`` wraps the loop (e.g. tqdm)."""
    if count < 1:
        raise InputError(f"count must be >= 1, got {count}")
    prior = prior or Prior()
    root = Path(out)
    header = {"format": FORMAT, "seed": seed, "prior": prior.to_dict()}
    marker = root / "groundtruth.json"
    if root.exists() and any(root.iterdir()):
        old = read_json(marker, what="ground-truth header") if marker.is_file() else None
        if old != header:
            raise InputError(f"{root} holds something else (not this prior and seed): choose a new --out")
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, header)
    loop: Iterator[int] = iter(range(count))
    entries = []
    for i in progress(loop, count) if progress else loop:
        target = root / _name(i)
        if not (target / "card.json").is_file():
            card, model, prompts = draw(prior, seed, i)
            with atomic_dir(target, replace=True) as tmp:
                save_model(model, tmp / "model")
                atomic_write_json(tmp / "ledger.json", ledger(model))
                save_file({k: v.contiguous() for k, v in prompts.items()}, str(tmp / "prompts.safetensors"))
                atomic_write_json(tmp / "card.json", card)
        entries.append({"name": _name(i), **read_json(target / "card.json", what="model card")})
    return atomic_write_json(root / "index.json", {**header, "count": count, "models": entries})


def load(out: str | Path) -> Iterator[GroundTruth]:
    """The models of a set ``write`` made, in order (each loaded and checked by
    [`icdl.construct.store.load`][icdl.construct.store.load])."""
    root = Path(out)
    index = read_json(root / "index.json", what="ground-truth index")
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise InputError(f"{root / 'index.json'} is not a ground-truth index ({FORMAT})")
    for entry in index["models"]:
        d = root / entry["name"]
        yield GroundTruth(
            name=entry["name"],
            card=read_json(d / "card.json", what="model card"),
            model=load_model(d / "model"),
            ledger=read_json(d / "ledger.json", what="ledger"),
            prompts=load_file(str(d / "prompts.safetensors")),
        )
