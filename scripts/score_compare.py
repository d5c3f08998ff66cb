"""Merge an ICL run's committed score curves with a baselines-only JSON of the same test prompts.

``python scripts/score_compare.py ICL.json BASELINES.json [--plot PNG]`` prints a markdown table of the
h-weighted score error (90 % bands at k = 10, 40; the mean over k = 1..40), and per baseline the k at which
it is below ICL. It refuses JSONs whose test prompts differ: the prior's and the empirical score's curves
(which need no model) must agree to 1e-12. Used for docs/score.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def merge(icl: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    for name in ("prior", "empirical"):
        a, b = icl["score_error"][name]["mse"], base["score_error"][name]["mse"]
        if len(a) != len(b) or max(abs(u - v) for u, v in zip(a, b, strict=True)) > 1e-12:
            sys.exit(f"score_compare: the two JSONs do not share their test prompts ({name} differs)")
    out = dict(base)
    out["score_error"] = {"icl": icl["score_error"]["icl"], **base["score_error"]}
    out["dsm_loss"] = {"icl": icl["dsm_loss"]["icl"], **base["dsm_loss"]}
    return out


def table(res: dict[str, Any], ks: tuple[int, ...] = (0, 1, 5, 10, 20, 40)) -> str:
    def f(v: float) -> str:
        return "–" if v != v else f"{v:.3f}"

    rows = [
        "| estimator | " + " | ".join(f"k = {k}" for k in ks) + " | mean k = 1..40 |",
        "|---|" + "---|" * (len(ks) + 1),
    ]
    icl = res["score_error"]["icl"]["mse"]
    wins = []
    for name, c in res["score_error"].items():
        m = c["mse"]
        cells = [f"{f(m[k])} [{f(c['low'][k])}, {f(c['high'][k])}]" if k in (10, 40) else f(m[k]) for k in ks]
        valid = [v for v in m[1:41] if v == v]
        mean = f(sum(valid) / len(valid)) if len(valid) == 40 else "–"
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {mean} |")
        if name != "icl":
            wins.append(
                f"{name} below icl at k = {[k for k in range(len(m)) if m[k] == m[k] and m[k] < icl[k]]}"
            )
    return "\n".join([*rows, "", *wins])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("icl", type=Path)
    ap.add_argument("baselines", type=Path)
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args()
    res = merge(json.loads(args.icl.read_text()), json.loads(args.baselines.read_text()))
    print(table(res))
    if args.plot is not None:
        from icdl.diffusion.plots import plot_score_curves

        plot_score_curves(res, args.plot)


if __name__ == "__main__":
    main()
