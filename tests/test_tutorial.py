"""docs/tutorial.md, executed as a Jupyter notebook (jupytext -> nbclient), its figures rendered.

The docs site executes the same notebook at every build (mkdocs-jupyter), and tests/test_api_site.py checks
the built page's outputs and figures; so in the fast tier this direct run would execute it a second time
(about 40 s): it is in the slow tier (``make test-all``), for a check without building the site."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"


@pytest.mark.slow
def test_tutorial_notebook_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = jupytext.read(TUTORIAL)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code_cells) >= 10
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, when one fails
    outputs = [o for c in code_cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 5, f"expected the tutorial's figures (the R² plot too), got {len(images)} images"
