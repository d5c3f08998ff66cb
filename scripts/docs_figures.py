"""Render the figures of docs/how-it-works.md into docs/img/ (run after changing the construction).

PYTHONPATH=src python scripts/docs_figures.py
"""

from __future__ import annotations

from pathlib import Path

from icdl.construct import compile_gd_transformer, sample_task
from icdl.inspect import plot_block_map, plot_residual, run_with_cache, slot_usage
from icdl.inspect.plots import save_figure
from icdl.nets import NetSpec

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


def main() -> None:
    spec = NetSpec(depth=2, width=3, in_dim=2, out_dim=1)
    model = compile_gd_transformer(spec, lr=0.1, steps=1, n=6)
    save_figure(plot_block_map(*slot_usage(model, readout=True)), OUT / "block-map.png", dpi=110)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=1)
    _, cache = run_with_cache(model, model.build_prompt(x, y, xq, w0))
    title = "residual stream after backward_1 (step 0)"
    fig = plot_residual(cache[0, "backward_1"], model.layout, title=title)
    save_figure(fig, OUT / "residual-backward.png", dpi=110)


if __name__ == "__main__":
    main()
