"""icdl.io: the documented file mode of atomic writes, and the wording of JSON read errors."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from icdl.errors import InputError
from icdl.io import atomic_write_json, atomic_write_text, portable_command, portable_path, read_json


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_write_gives_0666_minus_the_umask(tmp_path: Path, umask: None, mask: int, mode: int) -> None:
    """As documented in icdl.io: a new file, and one replaced over a 0600 file, get ``0o666 & ~umask``
    (mkstemp alone would leave 0600) -- written out as constants, not through ``file_mode``."""
    os.umask(mask)
    new = atomic_write_text(tmp_path / "new.txt", "x")
    old = tmp_path / "old.json"
    old.write_text("{}")
    os.chmod(old, 0o600)
    atomic_write_json(old, {"a": 1})
    assert stat.S_IMODE(new.stat().st_mode) == mode
    assert stat.S_IMODE(old.stat().st_mode) == mode
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


@pytest.mark.parametrize("text", ['{"a": [1, 2', '{"a": 1,', '{"a": "unterminated', "[1, 2]\n\n  "[:5]])
def test_read_json_calls_a_cut_off_file_truncated(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cut.json"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_json(path, what="cache")
    msg = str(info.value)
    assert "is truncated" in msg and "corrupt" not in msg and str(path) in msg and "\n" not in msg


@pytest.mark.parametrize("text", ['{"a": x1}', '{"a": 1}}', "[1, 2,, 3]", '{"a": 1} trailing'])
def test_read_json_calls_a_damaged_file_corrupt(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_json(path, what="cache")
    msg = str(info.value)
    assert "is corrupt" in msg and "truncated" not in msg and str(path) in msg and "\n" not in msg


def test_portable_path_never_records_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert portable_path("runs/a") == "runs/a"
    assert portable_path(tmp_path / "runs" / "a") == "runs/a"  # under the working directory: relative
    assert portable_path("/elsewhere/runs/cpu-s0") == "cpu-s0"  # outside it: the run's name
    cmd = portable_command(["x", str(tmp_path / "r"), "--out=/abs/o.json", "it's"])
    assert cmd == "x r --out=o.json 'it'\"'\"'s'"
    assert "/" + tmp_path.parts[1] not in cmd
