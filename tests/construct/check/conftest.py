"""Helpers the verifier's tests share, as fixtures (test modules do not import each other)."""

from __future__ import annotations

import pytest
import torch


def _own_trajectory(model, H0: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:  # type: ignore[no-untyped-def]
    """The transformer's weights at the start and after every step (a plain traced run), and its output."""
    last = len(model.block_layers) - 1
    ws = [model.read_weights(H0)[0].clone()]

    def trace(pt, H):  # type: ignore[no-untyped-def]
        if pt.step is not None and pt.index == last:
            ws.append(model.read_weights(H)[0].clone())

    out = model.run(H0, trace=trace)
    return ws, out


@pytest.fixture
def own_trajectory():  # type: ignore[no-untyped-def]
    """``own_trajectory(model, H0) -> (weights at the start and after every step, output)``."""
    return _own_trajectory
