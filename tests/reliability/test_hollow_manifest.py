"""Manifests that cannot be hollowed and a run config that cannot be edited silently (issue 34, item 2).

A checkpoint's manifest must list every file of the format (``model.safetensors``, ``state.pt``); an
emptied or partial list is corruption. A missing manifest is an error in a run of the current layout
(legacy only for the older one). ``config.yaml`` carries a SHA-256 seal checked by every reader, and
``icdl report`` verifies the checkpoint like every other reader.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from legacy_runs import make_legacy
from test_bounded import assert_one_line_error, run_cli

from icdl.config import load_config
from icdl.errors import InputError
from icdl.icl.evaluation.evaluate import EvalOptions, evaluate_run, result_status
from icdl.icl.training.train import find_checkpoint, load_run
from icdl.manifest import MANIFEST

TINY = ["train.steps=20", "train.checkpoint_every=10", "train.threads=1"]
CHEAP = EvalOptions(baselines=("zero",), resamples=20, cost=False)


def newest(run: Path) -> Path:
    ck = find_checkpoint(run)
    assert ck is not None
    return ck


def flip_bit(path: Path, from_end: int = 9) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) - from_end] ^= 0x01
    path.write_bytes(bytes(data))


def readers(run: Path) -> list[list[str]]:
    return [
        ["check", str(run)],
        ["evaluate", str(run), "--prompts", "4"],
        ["train", "tiny", "--out", str(run), "-q", *(f"--set={s}" for s in TINY)],
    ]


@pytest.mark.parametrize(
    ("keep", "damaged"),
    [({}, "model.safetensors"), ({"state.pt"}, "model.safetensors"), ({"model.safetensors"}, "state.pt")],
)
def test_emptied_or_partial_manifest_is_corruption(run_copy: Path, keep: set[str], damaged: str) -> None:
    ck = newest(run_copy)
    data = json.loads((ck / MANIFEST).read_text())
    data["files"] = {k: v for k, v in data["files"].items() if k in keep}
    (ck / MANIFEST).write_text(json.dumps(data))
    flip_bit(ck / damaged, from_end=13)
    for args in readers(run_copy):
        code, out, err = run_cli(args)
        if args[0] == "check":
            assert code == 2 and any(s.startswith("FAIL") and "does not list" in s for s in out.splitlines())
        else:
            assert_one_line_error(code, err, "does not list", MANIFEST)


def test_deleted_manifest_is_an_error_in_a_current_run(run_copy: Path) -> None:
    (newest(run_copy) / MANIFEST).unlink()
    flip_bit(newest(run_copy) / "model.safetensors")
    for args in readers(run_copy):
        code, out, err = run_cli(args)
        if args[0] == "check":
            assert code == 2 and "FAIL" in out and "legacy" not in out
        else:
            assert_one_line_error(code, err, "has no manifest.json")
    code, _, err = run_cli(["report", str(run_copy), "--evaluate", "none", "--out", str(run_copy / "r")])
    assert_one_line_error(code, err, "has no manifest.json")
    assert not (run_copy / "r").exists()


def test_legacy_layout_still_loads(run_copy: Path) -> None:
    make_legacy(run_copy)
    code, out, err = run_cli(["check", str(run_copy)])
    assert code == 0 and "legacy" in out, (out, err)
    model, _ = load_run(run_copy)
    assert model is not None


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("mean: -2.0", "mean: -3.0"),
        lambda t: t.replace("steps: 20", "steps: 21"),
        lambda t: t[: len(t) // 2],
        lambda t: t.split("\n", 1)[1],  # the seal line removed
        lambda t: t + "\n",
    ],
    ids=["mean", "steps", "truncated", "unsealed", "newline"],
)
def test_edited_config_is_refused_by_every_reader(run_copy: Path, edit: object) -> None:
    cfg = run_copy / "config.yaml"
    text = cfg.read_text()
    assert "mean: -2.0" in text and "steps: 20" in text
    cfg.write_text(edit(text))  # type: ignore[operator]
    assert cfg.read_text() != text
    for args in readers(run_copy):
        code, out, err = run_cli(args)
        if args[0] == "check":
            assert code == 2 and out.startswith("FAIL") and "config.yaml" in out.splitlines()[0]
        else:
            assert_one_line_error(code, err, "config.yaml", "seal")
    with pytest.raises(InputError, match="seal"):
        load_run(run_copy)


def test_sealed_config_reads_back_as_written(run_copy: Path) -> None:
    _, cfg = load_run(run_copy)
    assert cfg == load_config("tiny", TINY)


def test_report_verifies_a_checkpoint_newer_than_its_cache(run_copy: Path) -> None:
    evaluate_run(run_copy, "in-distribution", prompts=8, options=CHEAP, progress=False)
    assert result_status(run_copy, "in-distribution") == "ok"
    flip_bit(newest(run_copy) / "model.safetensors")  # also makes the checkpoint newer than the cache
    with pytest.raises(InputError, match="does not match its manifest"):
        result_status(run_copy, "in-distribution")
    out = run_copy.parent / "rep"
    code, _, err = run_cli(["report", str(run_copy), "--evaluate", "none", "--out", str(out)])
    assert_one_line_error(code, err, "model.safetensors")
    assert not out.exists()
