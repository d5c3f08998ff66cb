"""Add the k bands to committed ``icdl align`` results (issue 27): per-band means and the closest predictor
per band, computed from the per-k values already in each JSON
([`icdl.icl.analysis.align.add_bands`][icdl.icl.analysis.align.add_bands], the same code a fresh
``icdl align`` runs), so results written before the bands existed need no re-run.

    python scripts/align_bands.py docs/results/align/*/align.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from icdl.icl.analysis.align import add_bands
from icdl.io import atomic_write_json, clean_json


def main(paths: list[str]) -> None:
    if not paths:
        print("usage: python scripts/align_bands.py ALIGN_JSON [...]", file=sys.stderr)
        sys.exit(2)
    for p in paths:
        try:
            res = json.loads(Path(p).read_text(encoding="utf-8"))
            add_bands(res, res["run"]["train_examples"], max(res["ks"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # one line, not a traceback
            why = f"{type(exc).__name__}: {exc}"
            print(f"error: {p}: not a readable icdl align result ({why})", file=sys.stderr)
            sys.exit(2)
        atomic_write_json(p, clean_json(res))
        closest = ", ".join(f"k {b}: {r['closest']}" for b, r in res["closest"].items())
        print(f"{p}: {closest}")


if __name__ == "__main__":
    main(sys.argv[1:])
