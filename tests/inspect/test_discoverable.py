"""Lazy packages list their lazily imported names in ``dir()`` (tab completion, ``help``)."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["icdl", "icdl.icl", "icdl.inspect"])
def test_dir_lists_every_public_name(package: str) -> None:
    mod = importlib.import_module(package)
    missing = sorted(set(mod.__all__) - set(dir(mod)))
    assert not missing, f"dir({package}) lacks {missing}"
    for name in mod.__all__:
        assert getattr(mod, name) is not None
