"""The README's set-up installs a CPU build of torch with any pip configuration: its first command names
PyTorch's CPU wheel index, ``make install`` and ``.ci/run`` use the same, and pip's dry run of that command
resolves to a CPU torch with no CUDA packages (that check reaches PyTorch's index, so it runs only with
``ICDL_NETWORK_TESTS=1``: CI's machines reach no index but their own)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _setup_commands() -> list[str]:
    """The command lines of the first bash block of the README's "Set-up" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Set-up\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "no bash block in the README's Set-up section"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def _first_torch_install() -> list[str]:
    """The argv of the README's first command up to its first ``&&``: ``pip install torch==... ...``."""
    first = _setup_commands()[0].split("&&", 1)[0]
    return shlex.split(first)


def test_every_setup_command_installs_cpu_torch_first() -> None:
    commands = _setup_commands()
    assert len(commands) >= 2
    for line in commands:
        argv = shlex.split(line.split("&&", 1)[0])
        assert argv[:2] == ["pip", "install"] and argv[2].startswith("torch=="), line
        assert "--index-url" in argv and argv[argv.index("--index-url") + 1] == CPU_INDEX, line


def test_make_install_uses_the_cpu_index() -> None:
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert f"TORCH_INDEX ?= {CPU_INDEX}" in make
    assert re.search(r"install:\n\t\$\(PY\) -m pip install torch==\S+ \$\(if \$\(TORCH_INDEX\)", make)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "\nlint-imports\n" not in ci  # run once, by make typecheck (mypy && lint-imports)


def test_setup_pins_the_torch_ci_installs() -> None:
    readme_pin = _first_torch_install()[2]
    assert readme_pin in (ROOT / "Makefile").read_text(encoding="utf-8")
    assert readme_pin in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("ICDL_NETWORK_TESTS") != "1", reason="reaches PyTorch's index: set ICDL_NETWORK_TESTS=1"
)
def test_readme_first_command_resolves_to_cpu_torch(tmp_path: Path) -> None:
    """pip's dry run of the README's first command, as if nothing were installed: a CPU torch (``+cpu`` on
    Linux) and no ``nvidia-*`` / ``cuda-*`` package. Skipped only where pip resolves nothing at all (no
    network and no local wheel)."""
    argv = _first_torch_install()
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", *argv, "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
    cmd += ["--retries", "0", "--timeout", "30", "--disable-pip-version-check"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"pip could not resolve the command here: {r.stderr.strip().splitlines()[-1:]}")
    installs = {
        i["metadata"]["name"].lower(): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    assert "torch" in installs, installs
    cuda = sorted(n for n in installs if n.startswith(("nvidia", "cuda", "triton")))
    assert not cuda, f"the CPU route pulls CUDA packages: {cuda}"
    if sys.platform.startswith("linux"):
        assert installs["torch"].endswith("+cpu"), installs["torch"]
