"""``check_prompts``: every malformed prompt batch is one InputError that names the argument and what is
wrong with it; the smallest valid batch (one prompt of one point) passes."""

from __future__ import annotations

import pytest
import torch

from icdl.errors import InputError
from icdl.icl.baselines.simple import check_prompts

F64 = torch.float64


def _ok(B: int = 2, n: int = 3, dx: int = 2, dy: int = 1, dtype: torch.dtype = F64) -> tuple:
    return torch.zeros(B, n, dx, dtype=dtype), torch.zeros(B, n, dy, dtype=dtype)


@pytest.mark.parametrize(
    ("xs", "ys", "message"),
    [
        ([[[0.0]]], _ok()[1], "xs must be a torch.Tensor, got list"),
        (_ok()[0], (0.0,), "ys must be a torch.Tensor, got tuple"),
        (torch.zeros(2, 3, dtype=F64), _ok()[1], "xs must have shape (B, n, d), got (2, 3)"),
        (_ok()[0], torch.zeros(2, 3, 1, 1, dtype=F64), "ys must have shape (B, n, d), got (2, 3, 1, 1)"),
        (torch.zeros(2, 3, 2, dtype=torch.long), _ok()[1], "xs must be floating point, got torch.int64"),
        (_ok()[0], torch.zeros(2, 3, 1, dtype=torch.int32), "ys must be floating point, got torch.int32"),
        (_ok()[0], torch.zeros(2, 4, 1, dtype=F64), "xs (2, 3, 2) and ys (2, 4, 1) disagree on (B, n)"),
        (_ok()[0], torch.zeros(3, 3, 1, dtype=F64), "xs (2, 3, 2) and ys (3, 3, 1) disagree on (B, n)"),
        (
            _ok()[0],
            _ok(dtype=torch.float32)[1],
            "xs and ys must share dtype and device, got torch.float64/cpu",
        ),
        (*_ok(B=0), "need at least one prompt and one point, got (0, 3, 2)"),
        (*_ok(n=0), "need at least one prompt and one point, got (2, 0, 2)"),
    ],
)
def test_malformed_prompts_are_one_named_input_error(xs: object, ys: object, message: str) -> None:
    with pytest.raises(InputError) as err:
        check_prompts(xs, ys)  # type: ignore[arg-type]
    assert message in str(err.value)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 1, 3, 2), (4, 1, 1, 1), (1, 5, 1, 1)])
def test_the_smallest_batches_pass(shape: tuple[int, int, int, int]) -> None:
    B, n, dx, dy = shape
    check_prompts(*_ok(B, n, dx, dy))
