"""Shared test settings: float64 by default where tests ask for it, few threads, hypothesis profile."""

from __future__ import annotations

import os

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
