"""Shared test settings: float64 by default where tests ask for it, few threads, hypothesis profile."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

# Parallel test workers share 2 cores: one thread each (two 2-thread workers run ~12x slower).
torch.set_num_threads(int(os.environ.get("ICDL_TEST_THREADS", "1")))

settings.register_profile(
    "icdl",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile("icdl")


def _assert_nondegenerate(spec, x, y, w0, loss: str = "squared") -> None:  # type: ignore[no-untyped-def]
    """A prompt on which a GD check means something: two or more labels not all equal (one label is trivially
    "all equal"), and the gradient of L_n at w0 (by autograd, independent of icdl's Lemma 1 code) is not
    exactly zero, so the first GD step moves w."""
    from icdl.nets import empirical_risk

    assert y.shape[0] < 2 or not bool((y == y[:1]).all()), "degenerate task: all labels equal"
    w = w0.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(empirical_risk(spec, loss, w, x, y), w)
    assert bool((g != 0).any()), "degenerate task: the first GD step does not move w0"


@pytest.fixture
def assert_nondegenerate():  # type: ignore[no-untyped-def]
    """``assert_nondegenerate(spec, x, y, w0, loss="squared")``: fail on a task where GD never moves w."""
    return _assert_nondegenerate


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under mutmut (``make mutate``: it sets ``MUTANT_UNDER_TEST`` and runs in ``mutants/``), run the
    quickest tests first, by the durations its stats run measured: with ``-x`` a mutant is then killed by the
    first quick test that sees it instead of after the slow ones that happen to come first."""
    if "MUTANT_UNDER_TEST" not in os.environ:
        return
    stats = Path("mutmut-stats.json")
    if not stats.is_file():
        return
    durations = json.loads(stats.read_text(encoding="utf-8")).get("duration_by_test", {})
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
