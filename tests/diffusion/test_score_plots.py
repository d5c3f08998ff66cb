"""Score figures: every estimator the committed score results name gets its own colour."""

from __future__ import annotations

import json
from pathlib import Path

from icdl.diffusion.plots import estimator_color

ROOT = Path(__file__).resolve().parents[2]
RESULTS = [
    ROOT / "docs" / "score" / "curves.json",
    ROOT / "docs" / "results" / "score_baselines.json",
    ROOT / "docs" / "results" / "score_sampling.json",
]


def test_every_committed_estimator_has_its_own_colour() -> None:
    for path in RESULTS:
        data = json.loads(path.read_text())
        names = list(data.get("score_error") or data["sw"])
        assert len(names) >= 6, path.name
        colours = {n: estimator_color(n) for n in names}
        assert len(set(colours.values())) == len(names), (path.name, colours)
