"""Execute docs/tutorial.md (a jupytext notebook) and write it, outputs and figures included, as .ipynb.

python scripts/run_tutorial.py [OUT.ipynb]        # default docs/tutorial.ipynb (not committed)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import jupytext
import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "tutorial.ipynb"
    nb = jupytext.read(ROOT / "docs" / "tutorial.md")
    with tempfile.TemporaryDirectory() as cwd:
        nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": cwd}}
        ).execute()
    nbformat.write(nb, out)
    print(out)


if __name__ == "__main__":
    main()
