"""icdl's figures show inline in a plain Jupyter kernel: no ``%matplotlib inline``, no pyplot, no backend set.

A notebook is executed with nbclient in a fresh ipykernel with ``MPLBACKEND`` unset (as a kernel started
from a shell without it); each cell's last expression is an icdl figure, or a figure passed to
``display``. Every such cell must carry an ``image/png`` output, and the kernel must end with pyplot never
imported and the backend setting as it was (icdl draws without choosing a backend).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

SRC = Path(__file__).resolve().parents[2] / "src"

SETUP = """\
import sys, matplotlib, torch
before = dict.__getitem__(matplotlib.rcParams, "backend")
from icdl.inspect import plot_head_pattern
from icdl.icl.evaluation.plots import training_loss_figure
"""
FIGURES = [
    "plot_head_pattern(torch.rand(6, 6))",
    "training_loss_figure([{'step': s, 'loss': 1 / (s + 1), 'y_var': 1.0} for s in range(20)], 'loss')",
    "fig = plot_head_pattern(torch.rand(4, 4))\ndisplay(fig)\nNone",
]
CHECK = """\
assert "matplotlib.pyplot" not in sys.modules, "pyplot was imported"
assert dict.__getitem__(matplotlib.rcParams, "backend") == before, "the backend setting changed"
"""


def test_figures_show_in_a_kernel_without_the_magic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    cells = [nbformat.v4.new_code_cell(SETUP), *map(nbformat.v4.new_code_cell, FIGURES)]
    nb = nbformat.v4.new_notebook(cells=[*cells, nbformat.v4.new_code_cell(CHECK)])
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError (naming the cell) when the final check fails
    for cell, src in zip(nb.cells[1:-1], FIGURES, strict=True):
        pngs = [o["data"]["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(pngs) == 1, f"{src!r}: outputs {[sorted(o.get('data', {})) for o in cell.outputs]}"
        assert base64.b64decode(pngs[0])[:8] == b"\x89PNG\r\n\x1a\n"
