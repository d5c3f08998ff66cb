"""Typed config: presets, overrides, validation, and the CLI's exit-2 contract for bad configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from icdl.cli import main
from icdl.config import (
    Config,
    apply_overrides,
    config_diff,
    dump_config,
    list_presets,
    load_config,
    parse_overrides,
    validate,
)
from icdl.errors import InputError

PRESETS = ["tiny", "cpu-small", "paper-relu", "paper-softmax"]


@pytest.mark.parametrize("name", PRESETS)
def test_presets_load_by_name_and_path(name: str) -> None:
    cfg = load_config(name)
    assert cfg.name == name
    # The keys other tools rely on exist under these names.
    for key in ("steps", "batch_size", "lr", "seed", "checkpoint_every"):
        assert hasattr(cfg.train, key)
    for key in ("attention", "layers", "heads", "d_model"):
        assert hasattr(cfg.model, key)
    for key in ("depth", "width", "dim", "examples"):
        assert hasattr(cfg.task, key)
    from icdl.config import preset_path

    assert load_config(str(preset_path(name))) == cfg


def test_preset_list_and_paper_settings() -> None:
    assert set(PRESETS) <= set(list_presets())
    small = load_config("cpu-small")
    assert (small.model.layers, small.model.heads, small.model.d_model, small.model.d_mlp) == (4, 4, 64, 256)
    assert (small.task.dim, small.task.depth, small.task.width, small.task.examples) == (20, 6, 64, 30)
    assert small.task.inputs.means == [-2.0] and small.task.fan_in_scaling
    assert (small.train.batch_size, small.train.steps, small.train.warmup, small.train.lr) == (
        64,
        3000,
        200,
        1e-3,
    )
    for att in ("relu", "softmax"):
        p = load_config(f"paper-{att}")
        assert p.model.attention == att
        assert (p.model.layers, p.model.heads, p.model.d_model, p.model.d_mlp) == (12, 8, 256, 1024)
        assert (p.task.examples, p.train.batch_size, p.train.steps, p.train.lr) == (50, 64, 500_000, 1e-4)
        assert p.model.max_points >= 76  # test prompts of 75 examples + query
    relu, soft = load_config("paper-relu"), load_config("paper-softmax")
    assert set(config_diff(relu, soft)) == {"name", "model.attention"}


def test_overrides_are_yaml_scalars() -> None:
    cfg = load_config(
        "tiny",
        [
            "train.steps=7",
            "train.lr=1e-3",  # YAML 1.1 reads this as a string; pydantic converts it
            "model.attention=softmax",
            "task.inputs.mean=[-2, 2]",
            "task.inputs.weights=[0.9, 0.1]",
            "train.grad_clip=null",
            "train.curriculum.dims={start: 2, end: 5, inc: 1, interval: 10}",
        ],
    )
    assert cfg.train.steps == 7 and cfg.train.lr == pytest.approx(1e-3)
    assert cfg.model.attention == "softmax"
    assert cfg.task.inputs.means == [-2.0, 2.0] and cfg.task.inputs.mixture_weights == [0.9, 0.1]
    assert cfg.train.grad_clip is None
    assert cfg.train.curriculum.dims is not None and cfg.train.curriculum.dims.value(25) == 4


def test_parse_and_apply_overrides() -> None:
    assert parse_overrides(["a.b=3", "a.c=x y", "a.d="]) == [("a.b", 3), ("a.c", "x y"), ("a.d", None)]
    for bad in ("nokey", "=3", "a..b=1", "a.b=[1"):
        with pytest.raises(InputError):
            parse_overrides([bad])
    assert apply_overrides({"a": {"b": 1}}, [("a.c", 2)]) == {"a": {"b": 1, "c": 2}}
    with pytest.raises(InputError):
        apply_overrides({"a": 1}, [("a.b", 2)])


def test_dump_roundtrip() -> None:
    cfg = load_config("cpu-small", ["task.inputs.mean=[-2, 2]", "task.inputs.weights=[0.5, 0.5]"])
    again = validate(yaml.safe_load(dump_config(cfg)))
    assert again == cfg and config_diff(cfg, again) == {}


BAD = [
    ("train.steps=-5", "train.steps"),
    ("train.steps=0", "train.steps"),
    ("train.batch_size=0", "train.batch_size"),
    ("train.lr=0", "train.lr"),
    ("train.lr=abc", "train.lr"),
    ("model.heads=3", "divide"),
    ("model.attention=linear", "model.attention"),
    ("task.depth=1", "task.depth"),
    ("task.activation=swish", "activation"),
    ("task.inputs.weights=[0.5, 0.6]", "weights"),
    ("task.inputs.kind=cauchy", "inputs.kind"),
    ("task.examples=60", "max_points"),
    ("train.bogus=1", "unknown key"),
    ("bogus.key=1", "unknown key"),
    ("train.steps.x=1", "not a section"),
    ("train.schedule=linear", "train.schedule"),
    ("train.curriculum.dims={start: 2, end: 50}", "curriculum"),
]


@pytest.mark.parametrize(("override", "needle"), BAD)
def test_bad_configs_raise_input_error(override: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle.replace(".", r"\.")) as info:
        load_config("tiny", [override])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("override", "near"),
    [
        ("train.step=3", "train.steps"),
        ("trian.steps=3", "train"),
        ("model.layer=3", "model.layers"),
        ("task.inputs.meen=0", "task.inputs.mean"),
        ("model.lr=0.1", "train.lr"),  # the right key in the wrong section
    ],
)
def test_unknown_key_suggests_the_nearest(override: str, near: str) -> None:
    with pytest.raises(InputError, match=rf"did you mean '{near}'\?"):
        load_config("tiny", [override])
    with pytest.raises(InputError) as info:
        load_config("tiny", ["zzzz.qqq=1"])
    assert "did you mean" not in str(info.value)  # no far-fetched suggestion


def test_cli_unknown_key_suggestion_in_a_fresh_interpreter(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    args = ["train", "tiny", "--set", "train.step=3", "--out", str(tmp_path / "r")]
    proc = subprocess.run(
        [sys.executable, "-m", "icdl", *args], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 2 and "did you mean 'train.steps'?" in proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "r").exists()


def test_unknown_preset_and_missing_file() -> None:
    with pytest.raises(InputError, match="unknown preset"):
        load_config("no-such-preset")
    with pytest.raises(InputError, match="not found"):
        load_config("no/such/file.yaml")


def test_yaml_file_with_unknown_key(tmp_path: Path) -> None:
    p = tmp_path / "mine.yaml"
    p.write_text("model: {layers: 2, heads: 2, d_model: 16, d_mlp: 32, colour: red}\n")
    with pytest.raises(InputError, match=r"model\.colour: unknown key"):
        load_config(str(p))
    p.write_text("model: {layers: 2, heads: 2, d_model: 16, d_mlp: 32}\n")
    assert load_config(str(p)).name == "mine"
    assert isinstance(load_config(str(p)), Config)


CLI_BAD = [
    ["tiny", "--set", "train.steps=-1"],
    ["tiny", "--set", "model.heads=5"],
    ["tiny", "--set", "model.attention=cosine"],
    ["tiny", "--set", "task.depth=1"],
    ["tiny", "--set", "train.nope=3"],
    ["tiny", "--set", "broken"],
    ["no-such-preset"],
]


@pytest.mark.parametrize("args", CLI_BAD)
def test_cli_bad_config_exit_2_one_line_no_run_dir(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["train", *args, "--out", str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("icdl: error:") and "Traceback" not in err
    assert not out.exists()


def test_cli_print_config_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["train", "tiny", "--set", "train.steps=3", "--out", str(out), "--print-config"])
    assert info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["train"]["steps"] == 3 and printed["name"] == "tiny"
    assert not out.exists()
