"""``icdl check`` beside a run that is training (issue 34, item 5), deterministically: the pointer moves
and the checkpoint it named is rotated away between check's reads. "icdl check during training fails or
crashes in 4 of 22 calls": the pointer was looked at again, but the checkpoint it resolved to was read
once, so a rotation in between gave a spurious FAIL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import icdl.icl.training.checkpoint as checkpoint
from icdl.cli.check import check_run
from icdl.errors import InputError


def _moving(real: Any, times: int, exc: Exception) -> Any:
    """``real``, failing ``times`` times first with ``exc`` (what a rotation under the read gives)."""
    calls = {"n": 0}

    def fn(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= times:
            raise exc
        return real(*args, **kwargs)

    return fn


def test_checkpoint_rotated_while_the_pointer_is_resolved(run_copy: Path, monkeypatch: Any) -> None:
    gone = InputError("no checkpoint of the run verifies (step_0000010: manifest.json is missing)")
    monkeypatch.setattr(checkpoint, "find_checkpoint", _moving(checkpoint.find_checkpoint, 2, gone))
    items = check_run(run_copy)
    assert [i for i in items if i[0] == "FAIL"] == []
    assert any(i[0] == "ok" and i[1].endswith("latest") and "step_0000020" in i[2] for i in items), items


def test_pointer_read_while_it_is_replaced(run_copy: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(
        checkpoint, "find_checkpoint", _moving(checkpoint.find_checkpoint, 1, FileNotFoundError("latest"))
    )
    assert [i for i in check_run(run_copy) if i[0] == "FAIL"] == []


def test_a_pointer_that_stays_damaged_still_fails(run_copy: Path) -> None:
    (run_copy / "checkpoints" / "latest").write_text("step_9999999\n")
    items = check_run(run_copy)
    assert [i[1] for i in items if i[0] == "FAIL"] == [str(run_copy / "checkpoints" / "latest")]
