"""Damaged inputs and unwritable outputs: one line naming the file, exit 2, evidence never overwritten.

Covers corrupt or truncated checkpoints (weights and optimizer state), a damaged ``latest`` pointer, run
config and evaluation cache (on resume, evaluate, report and load), outputs checked before any work, the
clean-up of temporary checkpoint folders, the empty config file and the finished run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from icdl.cli import main
from icdl.config import load_config
from icdl.errors import InputError
from icdl.icl.evaluation.evaluate import EvalOptions, evaluate_run, load_result, result_path
from icdl.icl.training.train import clean_stale_temporaries, find_checkpoint, load_run, train

TINY = ["train.steps=4", "train.checkpoint_every=2", "train.keep_checkpoints=1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("hard") / "run"
    train(load_config("tiny", TINY), run, quiet=True)
    opts = EvalOptions(baselines=("averaging",), resamples=10, cost=False)
    evaluate_run(run, "in-distribution", prompts=8, options=opts, progress=False)
    return run


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_one_line(code: int, err: str, needle: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("icdl: error: ") and "Traceback" not in err
    assert needle in err, err


def _ckpt(run: Path) -> Path:
    ck = find_checkpoint(run)
    assert ck is not None
    return ck


DAMAGE = {
    "weights-truncated": lambda ck: (ck / "model.safetensors").write_bytes(
        (ck / "model.safetensors").read_bytes()[:50]
    ),
    "weights-garbage": lambda ck: (ck / "model.safetensors").write_bytes(b"\x01" * 300),
    "state-truncated": lambda ck: (ck / "state.pt").write_bytes((ck / "state.pt").read_bytes()[:80]),
    "state-garbage": lambda ck: (ck / "state.pt").write_bytes(b"not a zip"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_checkpoint_on_resume(run: Path, damage: str, capsys: pytest.CaptureFixture[str]) -> None:
    ck = _ckpt(run)
    DAMAGE[damage](ck)
    before = snapshot(run)
    sets = [a for t in [*TINY, "train.steps=6"] for a in ("--set", t)]
    code, _, err = cli(capsys, "train", "tiny", "--out", str(run), "-q", *sets)
    name = "model.safetensors" if damage.startswith("weights") else "state.pt"
    assert_one_line(code, err, name)
    assert snapshot(run) == before  # the evidence is untouched


@pytest.mark.parametrize("damage", ["weights-truncated", "weights-garbage"])
def test_damaged_weights_on_evaluate_report_and_load(
    run: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    DAMAGE[damage](_ckpt(run))
    before = snapshot(run)
    code, _, err = cli(capsys, "evaluate", str(run), "--prompts", "8", "--force", "--baselines", "none")
    assert_one_line(code, err, "model.safetensors")
    code, _, err = cli(capsys, "report", str(run), "--evaluate", "all", "--suites", "mixture")
    assert_one_line(code, err, "model.safetensors")
    with pytest.raises(InputError, match=r"model\.safetensors"):
        load_run(run)
    assert snapshot(run) == before


def test_tampered_weights_do_not_fit(run: Path) -> None:
    from safetensors.torch import load_file, save_file

    from icdl.manifest import write_manifest

    f = _ckpt(run) / "model.safetensors"
    w = load_file(str(f))
    w.pop(next(iter(w)))  # an entry removed
    save_file(w, str(f))
    write_manifest(f.parent)  # manifest rewritten to match: the shape check behind it still refuses
    with pytest.raises(InputError, match="does not fit"):
        load_run(run)


def test_damaged_latest_pointer(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "checkpoints" / "latest").write_text("step_9999999\n")
    before = snapshot(run)
    # Checked, not trusted (issue 34): both use the newest checkpoint that verifies and say so.
    newest = sorted((run / "checkpoints").glob("step_*"))[-1].name
    code, _, err = cli(capsys, "train", "tiny", "--out", str(run), *(a for t in TINY for a in ("--set", t)))
    assert code == 0 and f"names 'step_9999999', which is not a complete checkpoint; using {newest}" in err
    assert snapshot(run) == before  # nothing to train: nothing written, nothing rotated
    code, _, err = cli(capsys, "evaluate", str(run), "--prompts", "8")
    assert code == 0, err


@pytest.mark.parametrize("content", ["", "task: [unclosed", "- a list", "\xff\xfe"])
def test_damaged_run_config(run: Path, content: str, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "config.yaml").write_bytes(content.encode("latin-1"))
    before = snapshot(run)
    code, _, err = cli(capsys, "evaluate", str(run), "--prompts", "8")
    assert_one_line(code, err, "config.yaml")
    code, _, err = cli(capsys, "train", "tiny", "--out", str(run), *(a for t in TINY for a in ("--set", t)))
    assert_one_line(code, err, "config.yaml")
    assert snapshot(run) == before


@pytest.mark.parametrize(
    "content", ["{", '{"format": "icdl-eval-v1"', "[]", '{"format": "other"}', "\x00\x01"]
)
def test_damaged_eval_cache(run: Path, content: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = result_path(run, "in-distribution")
    path.write_text(content)
    before = snapshot(run)
    code, _, err = cli(capsys, "evaluate", str(run), "--prompts", "8", "--baselines", "averaging")
    assert_one_line(code, err, "in-distribution.json")
    code, _, err = cli(capsys, "report", str(run), "--out", str(run.parent / "rep"))
    assert_one_line(code, err, "in-distribution.json")
    assert snapshot(run) == before
    with pytest.raises(InputError):
        load_result(run, "in-distribution")
    # --force recomputes on purpose (the one way to replace a damaged cache)
    opts = ["--prompts", "8", "--baselines", "averaging", "--resamples", "10", "--no-cost", "-q", "--force"]
    code, _, err = cli(capsys, "evaluate", str(run), *opts)
    assert code == 0, err
    assert json.loads(path.read_text())["format"] == "icdl-eval-v1"


def test_outputs_checked_before_work(tmp_path: Path, run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cases = [
        (
            ["construct", "--depth", "2", "--width", "2", "--steps", "1", "--save", str(blocker / "m")],
            "--save",
        ),
        (["construct", "--depth", "2", "--width", "2", "--steps", "1", "--save", str(blocker)], "--save"),
        (["train", "tiny", "--out", str(blocker / "run")], "--out"),
        (["train", "tiny", "--out", str(blocker)], "--out"),
        (["report", str(run), "--out", str(blocker / "rep")], "--out"),
        (["approx", "sigmoid", "--plot", str(blocker / "p.png")], "--plot"),
        (["approx", "sigmoid", "--plot", str(tmp_path)], "--plot"),
        (["demo", "--out", str(blocker / "demo")], "--out"),
    ]
    before = snapshot(tmp_path)
    for args, needle in cases:
        code, out, err = cli(capsys, *args)
        assert_one_line(code, err, needle)
        assert out == ""  # refused before any work (nothing computed, nothing printed)
    assert snapshot(tmp_path) == before


def test_stale_temporary_checkpoints_cleaned(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ck = run / "checkpoints"
    stale = ck / ".tmp-step_0000006-12345"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    (ck / ".latest.abc.tmp").write_text("step_0000006")
    code, _, err = cli(capsys, "train", "tiny", "--out", str(run), "-q",
                       *(a for t in TINY for a in ("--set", t)), "--set", "train.steps=6")  # fmt: skip
    assert code == 0, err
    assert not [p for p in ck.iterdir() if p.name.startswith(".")]
    assert find_checkpoint(run) == ck / "step_0000006"
    assert clean_stale_temporaries(run) == []


def test_finished_run_says_nothing_was_trained(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(run)
    code, _, err = cli(capsys, "train", "tiny", "--out", str(run), *(a for t in TINY for a in ("--set", t)))
    assert code == 0
    assert "nothing to train" in err and "already complete (4 steps)" in err
    code, out, _ = cli(
        capsys, "train", "tiny", "--out", str(run), "--json", *(a for t in TINY for a in ("--set", t))
    )
    assert code == 0 and json.loads(out)["trained_steps"] == 0
    assert snapshot(run) == before


def test_empty_config_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    code, _, err = cli(capsys, "train", str(empty), "--out", str(tmp_path / "r"))
    assert_one_line(code, err, "empty")
    (tmp_path / "comments.yaml").write_text("# only a comment\n")
    code, _, err = cli(capsys, "train", str(tmp_path / "comments.yaml"), "--out", str(tmp_path / "r"))
    assert_one_line(code, err, "empty")
    assert not (tmp_path / "r").exists()


def test_yes_lets_large_work_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal is a limit, not a ban: with the memory limit lowered to 1 byte every command refuses,
    and --yes runs it anyway."""
    import icdl.budget

    monkeypatch.setattr(icdl.budget, "MAX_BYTES", 1)
    args = ["theory", "--depth", "3", "--width", "2", "--in-dim", "1", "--out-dim", "1", "--steps", "1"]
    code, _, err = cli(capsys, *args)
    assert_one_line(code, err, "would need about")
    assert "--yes" in err
    code, out, err = cli(capsys, *args, "--yes")
    assert code == 0 and "embedding dim" in out, err


def test_estimates_track_the_sizes() -> None:
    """The estimate grows with each size it depends on (the refusal threshold is meaningful)."""
    from icdl.budget import MAX_BYTES
    from icdl.construct.estimate import construction_estimate
    from icdl.nets import NetSpec
    from icdl.theory_report import compute_estimate

    small = construction_estimate(NetSpec(3, 8, 4, 1), steps=5, examples=32)
    assert not small.too_large()
    for kw in ({"steps": 50}, {"examples": 320}):
        bigger = construction_estimate(NetSpec(3, 8, 4, 1), **{"steps": 5, "examples": 32, **kw})
        assert bigger.bytes > small.bytes
    wide = construction_estimate(NetSpec(3, 4096, 4, 1), steps=100, examples=32)
    assert wide.bytes > MAX_BYTES and wide.too_large()
    assert compute_estimate(NetSpec(10**9, 10**9, 2, 1)).too_large()
    assert not compute_estimate(NetSpec(2000, 4, 2, 1)).too_large()
