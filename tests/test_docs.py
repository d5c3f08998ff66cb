"""Every fenced ```python block of README.md and docs/*.md runs, page by page, as a reader would run it.

Blocks of one page run in order in one namespace (later blocks use earlier names), in a fresh temporary
working directory, so relative output paths (``runs/demo``) never touch the repository or a user's runs/.
A block preceded by the line ``<!-- docs-test: skip (reason) -->`` is not run (say why in the reason); one
preceded by ``<!-- docs-test: requires MODULE -->`` runs only where MODULE imports (an optional extra, e.g.
``transformer_lens``; CI installs the extras, so it runs there).
docs/tutorial.md is a jupytext notebook: tests/test_tutorial.py executes it as a notebook instead.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\b.*-->")
REQUIRES = re.compile(r"<!--\s*docs-test:\s*requires\s+([\w.]+)\s*-->")
FENCE = re.compile(r"^(\s*)```(\w*)[^\n]*$")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """``(first line number, source, skipped)`` of every fenced block whose info string is ``python``."""
    lines = text.splitlines()
    out: list[tuple[int, str, bool]] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[j]):
            j += 1
        if lang == "python":
            prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            body = "\n".join(ln[len(indent) :] for ln in lines[i + 1 : j])
            needs = REQUIRES.search(prev)
            missing = needs is not None and importlib.util.find_spec(needs.group(1)) is None
            out.append((i + 2, body, bool(SKIP.search(prev)) or missing))
        i = j + 1
    return out


NOTEBOOKS = {ROOT / "docs" / "tutorial.md"}  # executed as a Jupyter notebook by tests/test_tutorial.py
PAGES = [p for p in pages() if p not in NOTEBOOKS and python_blocks(p.read_text())]


def test_harness_finds_blocks() -> None:
    text = (
        "x\n```python\na = 1\n```\n<!-- docs-test: skip (needs a GPU) -->\n"
        "```python\nb\n```\n```bash\nc\n```\n"
    )
    assert python_blocks(text) == [(3, "a = 1", False), (7, "b", True)]
    needs = "<!-- docs-test: requires {} -->\n```python\nc\n```\n"
    assert python_blocks(needs.format("json") + needs.format("no_such_module_xyz")) == [
        (3, "c", False),
        (7, "c", True),
    ]
    assert any(p.name == "README.md" for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": "__docs__"}
    rel = page.relative_to(ROOT)
    for line, source, skipped in python_blocks(page.read_text()):
        if skipped:
            continue
        code = compile(source, f"{rel}:{line}", "exec")
        try:
            exec(code, namespace)
        except Exception as e:
            raise AssertionError(f"{rel}, block at line {line} failed: {type(e).__name__}: {e}") from e
        finally:
            plt.close("all")


def test_citation_file() -> None:
    import yaml

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"].startswith("1.2")
    paper = cff["preferred-citation"]
    assert paper["title"] == "In-Context Deep Learning via Transformer Models" and paper["year"] == 2025
    assert [a["family-names"] for a in paper["authors"]] == ["Wu", "Su", "Hu", "Song", "Liu"]
    assert cff["version"] == __import__("icdl").__version__


def test_no_reference_to_notes_outside_the_repository() -> None:
    """Docs, code and tests cite the paper or docs/*.md, never the project's private notes."""
    import subprocess

    names = ("paper" + "-notes", "experiments" + r"\.md", "design" + r"\.md", "code" + "-review")
    pattern = "|".join(names)  # spelled in pieces so that this file does not match itself
    files = subprocess.run(
        ["git", "grep", "-lE", pattern], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    assert files == [], files
