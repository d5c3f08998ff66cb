"""The demo's side-by-side table of the paper's task and the centred task."""

from __future__ import annotations

import json
from pathlib import Path

from icdl.cli.demo import CENTRED_CLAIM, task_table


def _result(values: dict[str, list[float | None]]) -> dict:
    preds = {kind: {"r2": r2, "meta": {"kind": kind}} for kind, r2 in values.items()}
    return {"conditions": {"c": {"predictors": preds}}}


def test_task_table_reads_each_kind_at_each_k() -> None:
    paper = _result({"icl": [0.0, 0.8, 0.9], "averaging": [0.0, 0.7, 0.85], "ridge": [0.0, 0.6, 0.95]})
    centred = _result({"icl": [0.0, 0.1, 0.3], "averaging": [0.0, -0.5, -0.1], "mlp-best": [None, 0.2, None]})
    rows = task_table(paper, centred, ks=(1, 2))
    assert len(rows) == 3 and "paper's task" in rows[0] and "centred task" in rows[0]
    one = rows[1].split("|")
    assert one[0].strip() == "1"
    assert one[1].split() == ["+0.80", "+0.70", "+0.60", "–"]  # no MLP on the paper side
    assert one[2].split() == ["+0.10", "-0.50", "–", "+0.20"]  # no ridge on the centred side
    assert rows[2].split("|")[2].split() == ["+0.30", "-0.10", "–", "–"]  # MLP not run at k = 2


def test_the_closing_centred_claim_is_the_committed_curves() -> None:
    c = CENTRED_CLAIM
    root = Path(__file__).resolve().parents[2]
    data = json.loads((root / c["source"]).read_text())
    preds = data["suites"]["in-distribution"]["conditions"]["train"]["predictors"]
    k = c["k"]
    icl, avg = preds["icl"], preds["averaging"]
    assert (icl["mean"][k], icl["seed_min"][k], icl["seed_max"][k]) == (c["icl"], c["icl_min"], c["icl_max"])
    assert avg["mean"][k] == c["averaging"]
    assert len(icl["per_seed"]) == 3  # "mean of three training seeds"
