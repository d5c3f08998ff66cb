"""Numbers in README.md and docs/ agree with the committed JSON they name, and committed JSON is portable.

``scripts/docs_numbers.py`` regenerates every ``<!-- json:FILE:KEY FMT -->`` marker and every
``<!-- curves:NAME -->`` table from its JSON; here the regeneration runs in memory and must change
nothing. Committed JSON (docs/, benchmarks/) must not carry the writer's absolute paths (issue 33).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from icdl.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_numbers", ROOT / "scripts" / "docs_numbers.py")
assert _spec is not None and _spec.loader is not None
docs_numbers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_numbers)

DOCS = docs_numbers.doc_files()
ABSOLUTE = re.compile(r"^(/work/|/home/|/root/|/tmp/|/Users/|[A-Za-z]:[\\/])")
COMMITTED_JSON = sorted([*(ROOT / "docs").rglob("*.json"), *(ROOT / "benchmarks").rglob("*.json")])


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_numbers_agree_with_their_json(path: Path) -> None:
    text = path.read_text()
    assert docs_numbers.fill(text) == text, f"{path.name}: run python scripts/docs_numbers.py"


def test_readme_results_carry_markers() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(docs_numbers.MARKER.findall(text)) >= 200  # README's results tables and prose
    assert len(docs_numbers.CURVES.findall(text)) >= 3


def test_a_stale_number_is_rewritten() -> None:
    good = "ε <!-- json:docs/results/construct_reference/relu.json:eps_grad .1e -->4.1e-15<!-- /json --> ok"
    assert docs_numbers.fill_json(good) == good
    stale = good.replace(">4.1e-15<", ">3.9e-15<")
    assert docs_numbers.fill_json(stale) == good


def test_lookup_paths_formats_and_errors() -> None:
    data: dict[str, Any] = {"rows": [{"case": "a", "s": 1.0}, {"case": "b", "s": 2.0e-7}], "n": 1749}
    assert docs_numbers.lookup(data, "rows.case=b.s", "m") == 2.0e-7
    assert docs_numbers.lookup(data, "rows.0.s", "m") == 1.0
    assert docs_numbers.render(2.0e-7, ".1e") == "2.0e-7"
    assert docs_numbers.render(5988971, ".1e") == "6.0e6"
    assert docs_numbers.render(1749, ",") == "1,749"
    with pytest.raises(InputError, match="no key 'x'"):
        docs_numbers.lookup(data, "rows.0.x", "m")
    with pytest.raises(InputError, match="0 list elements"):
        docs_numbers.lookup(data, "rows.case=c.s", "m")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [str(k), *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def absolute_paths(value: Any) -> list[str]:
    """Every string in ``value`` (or a token of one) that is a machine-specific absolute path."""
    return [tok for s in _strings(value) for tok in s.split() if ABSOLUTE.match(tok.split("=")[-1])]


def test_the_scan_sees_an_absolute_path() -> None:
    assert absolute_paths({"command": "python x.py /work/runs/a --out=/tmp/b", "r": [{"d": "C:\\x"}]}) == [
        "/work/runs/a",
        "--out=/tmp/b",
        "C:\\x",
    ]
    assert absolute_paths({"command": "python x.py runs/a --out docs/results/x.json", "unit": "a/b"}) == []


def test_committed_json_has_no_absolute_paths() -> None:
    assert len(COMMITTED_JSON) > 20
    bad = {
        str(p.relative_to(ROOT)): hits[:3]
        for p in COMMITTED_JSON
        if (hits := absolute_paths(json.loads(p.read_text())))
    }
    assert bad == {}
