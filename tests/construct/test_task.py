"""The redraw loop shared by every task the CLI verifies on (`redraw_while_degenerate`), and the degeneracy
test at its edge: a task with one example."""

from __future__ import annotations

import pytest
import torch

from icdl.construct.task import redraw_while_degenerate, sample_task, sample_task_info, task_is_degenerate
from icdl.errors import InputError
from icdl.nets import NetSpec, reference_gd


def test_the_loop_returns_the_first_good_draw_and_counts_the_draws() -> None:
    draws = [0, 0, 7, 0, 9]  # 0 is "degenerate"; a plain list is the reference
    calls: list[int] = []

    def draw(i: int) -> int:
        calls.append(i)
        return draws[i - 1]

    assert redraw_while_degenerate(draw, lambda v: v == 0) == (7, 3)
    assert calls == [1, 2, 3]  # 1-based, and no draw after the good one
    assert redraw_while_degenerate(lambda i: draws[i - 1], lambda v: v == 0, nondegenerate=False) == (0, 1)


def test_the_loop_gives_up_after_max_draws_with_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import icdl.construct.task as task

    monkeypatch.setattr(task, "MAX_DRAWS", 4)
    calls: list[int] = []
    with pytest.raises(InputError, match="no non-degenerate thing in 4 draws") as exc:
        redraw_while_degenerate(lambda i: calls.append(i) or 0, lambda v: True, what="thing")
    assert calls == [1, 2, 3, 4] and "--raw-task" in str(exc.value)
    assert isinstance(exc.value, ValueError)  # library callers catch a ValueError


def test_one_example_is_not_degenerate_for_its_one_label(assert_nondegenerate) -> None:
    """One label is trivially "all equal": with n = 1 only a w0 that GD does not move is degenerate (every
    draw used to be rejected, so `icdl construct -n 1` raised after 100 draws)."""
    spec = NetSpec(2, 4, 3, 1)
    for seed in range(5):
        task = sample_task_info(spec, 1, seed=seed)
        assert task.draws < 5
        assert_nondegenerate(spec, task.x, task.y, task.w0)
        traj = reference_gd(spec, "squared", task.w0, task.x, task.y, lr=1.0, steps=1)
        assert not torch.equal(traj[1], traj[0])
    x, y, _, w0, _ = sample_task(spec, 3, seed=0)
    same = y[:1].expand_as(y)  # n >= 2 equal labels still are degenerate, even where GD moves w
    traj = reference_gd(spec, "squared", w0, x, same, lr=1.0, steps=1)
    assert not torch.equal(traj[1], traj[0]) and task_is_degenerate(spec, "squared", x, same, w0)
