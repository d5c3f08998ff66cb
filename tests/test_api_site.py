"""The docs site builds under ``--strict`` and its API page renders the docstrings: no Sphinx role
(``:func:`x```) left as literal text, no unresolved cross-reference, every public module listed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROLE_IN_HTML = re.compile(r":(func|class|mod|meth|data|attr|obj|exc):(<code>|`)")
ROLE_IN_SOURCE = re.compile(r":(func|class|mod|meth|data|attr|obj|exc):`")


def public_modules() -> list[str]:
    """Every module of ``src/icdl`` without a leading underscore in its path, the CLI excepted."""
    out = []
    for f in sorted((ROOT / "src" / "icdl").rglob("*.py")):
        parts = f.relative_to(ROOT / "src").with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts) or parts[:2] == ("icdl", "cli"):
            continue
        out.append(".".join(parts))
    return out


def test_api_page_lists_every_public_module() -> None:
    listed = set(re.findall(r"^::: (\S+)", (ROOT / "docs" / "api.md").read_text(), re.M))
    assert [m for m in public_modules() if m not in listed] == []


def test_no_sphinx_roles_in_docstrings() -> None:
    hits = [
        f"{f.relative_to(ROOT)}:{i}"
        for f in sorted((ROOT / "src" / "icdl").rglob("*.py"))
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if ROLE_IN_SOURCE.search(line) or line.rstrip().endswith(("Usage::", "Example::", "Examples::"))
    ]
    assert hits == []


def test_site_builds_strict_without_literal_roles(tmp_path: Path) -> None:
    """One build (it executes the tutorial, so it is the slowest test here): strict, no literal role, API
    links, and the tutorial page executed with its figures."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    pytest.importorskip("mkdocs_jupyter")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "Could not find cross-reference target" not in log
    # mkdocs' warnings (the notebook kernel's "[IPKernelApp] WARNING" on its local transport is not one)
    assert [ln for ln in log.splitlines() if ln.startswith("WARNING")] == []
    pages = sorted(site.rglob("*.html"))
    assert pages
    literal = [
        f"{p.relative_to(site)}: {m.group(0)}" for p in pages for m in ROLE_IN_HTML.finditer(p.read_text())
    ]
    assert literal == []
    api = (site / "api" / "index.html").read_text()
    assert "autorefs-internal" in api  # cross-references became links
    assert_tutorial_executed((site / "tutorial" / "index.html").read_text())


def assert_tutorial_executed(page: str) -> None:
    """The tutorial page carries the notebook's outputs: its figures as inline PNGs, a printed result
    (``final loss 0.123 after 150 steps``, which only an executed cell prints), and no stderr output."""
    figures = re.findall(r'<img[^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', page)
    assert len(figures) >= 4, f"expected the tutorial's 4 figures, found {len(figures)}"
    assert re.search(r"final loss \d+\.\d{3} after 150 steps", page)
    stderr_div = r'<div[^>]*data-mime-type="application/vnd.jupyter.stderr"[^>]*>(.{0,200})'
    stderr = re.findall(stderr_div, page, re.S)
    assert stderr == [], f"stderr output on the tutorial page: {stderr}"
