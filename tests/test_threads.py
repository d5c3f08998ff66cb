"""icdl.threads: the thread count chosen for a command's work, and who may override it."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import pytest
import torch

from icdl import threads
from icdl.cli import main
from icdl.errors import InputError


@pytest.fixture(autouse=True)
def keep_torch_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    old = torch.get_num_threads()
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize(
    ("cores", "load", "expected"),
    [
        (2, 0.0, 2),
        (2, 0.3, 2),
        (2, 0.6, 1),
        (2, 1.0, 1),
        (2, 5.0, 1),
        (16, 4.4, 12),
        (16, 0.0, 16),
        (1, 0.0, 1),
    ],
)
def test_idle_cores_is_cores_minus_other_load_between_1_and_cores(
    cores: int, load: float, expected: int
) -> None:
    assert threads.idle_cores(cores, load) == expected


def test_the_users_choice_wins_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "other_load", lambda: 0.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    assert threads.choose_threads("large") == threads.ThreadChoice(8, "idle cores")
    assert threads.choose_threads("small") == threads.ThreadChoice(1, "small work")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    torch.set_num_threads(3)  # what torch made of OMP_NUM_THREADS at start-up: left alone
    assert threads.choose_threads("large") == threads.ThreadChoice(3, "OMP_NUM_THREADS")
    assert threads.choose_threads("small").threads == 3
    monkeypatch.setenv(threads.ENV, "5")
    assert threads.choose_threads("small") == threads.ThreadChoice(5, threads.ENV)
    assert threads.choose_threads("small", 2) == threads.ThreadChoice(2, "--threads")


def test_a_busy_machine_gets_fewer_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "other_load", lambda: 1.0)  # one other busy process on 2 cores
    assert threads.apply_threads("large").threads == 1
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_a_bad_icdl_threads_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(threads.ENV, bad)
    with pytest.raises(InputError, match=threads.ENV):
        threads.choose_threads("small")


def test_other_load_reads_this_machine() -> None:
    assert threads.other_load() >= 0.0
    assert 1 <= threads.idle_cores() <= threads.usable_cores()


def run_cli(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exc:
            return int(exc.code or 0)
    return 0


def test_construct_runs_on_one_thread_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "other_load", lambda: 0.0)  # a quiet 4-core machine: large work gets 4
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    torch.set_num_threads(2)
    assert run_cli(["construct", "-N", "2", "-K", "2", "-n", "4", "-L", "1", "--json"]) == 0
    assert torch.get_num_threads() == 1
    assert run_cli(["construct", "-N", "2", "-K", "2", "-n", "4", "-L", "1", "--json", "--threads", "3"]) == 0
    assert torch.get_num_threads() == 3
    monkeypatch.setenv(threads.ENV, "2")
    assert run_cli(["construct", "-N", "2", "-K", "2", "-n", "4", "-L", "1", "--json"]) == 0
    assert torch.get_num_threads() == 2


def test_train_threads_beats_the_config_and_is_recorded(tmp_path: pytest.TempPathFactory) -> None:
    run = tmp_path / "run"  # type: ignore[operator]
    argv = ["train", "tiny", "--out", str(run), "--set", "train.steps=2", "--set", "train.threads=2"]
    assert run_cli([*argv, "--threads", "1", "--quiet"]) == 0
    assert torch.get_num_threads() == 1
    assert "threads: 1" in (run / "config.yaml").read_text()
