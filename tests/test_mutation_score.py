"""scripts/mutation_score.py: mutmut's result lines counted per module, and the score's definition."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("mutation_score", ROOT / "scripts" / "mutation_score.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_lines_are_counted_per_module_and_unjudged_mutants_are_left_out_of_the_score() -> None:
    ms = _script()
    text = "\n".join(
        [
            "    icdl.construct.bounds.ranges.x__backward__mutmut_1: killed",
            "    icdl.construct.bounds.ranges.x__backward__mutmut_2: survived",
            "    icdl.construct.bounds.ranges.xǁ_Ivǁmag__mutmut_3: killed",
            "    icdl.construct.bounds.ranges.xǁRangeBoundsǁto_dict__mutmut_1: no tests",
            "    icdl.construct.bounds.ranges.x_trajectory_bounds__mutmut_9: checked",
            "    icdl.icl.baselines.kernel.x_fit__mutmut_1: killed",
            "some other line",
        ]
    )
    table = ms.parse(text)
    assert set(table) == {"icdl.construct.bounds.ranges", "icdl.icl.baselines.kernel"}
    r = table["icdl.construct.bounds.ranges"]
    assert (r["killed"], r["survived"], r["no_tests"], r["not_checked"]) == (2, 1, 1, 1)
    assert ms.score(r) == 2 / 4  # a mutant no test reaches counts against the score; unchecked do not
    assert ms.score(table["icdl.icl.baselines.kernel"]) == 1.0
    assert ms.score(ms.parse("")["nothing"]) is None
    # the names a triage re-runs: survived and untested, not killed or unchecked, not equivalent
    assert ms.survivors(text) == [
        "icdl.construct.bounds.ranges.x__backward__mutmut_2",
        "icdl.construct.bounds.ranges.xǁRangeBoundsǁto_dict__mutmut_1",
    ]
    eq = frozenset({"icdl.construct.bounds.ranges.x__backward__mutmut_2"})
    assert ms.survivors(text, eq) == ["icdl.construct.bounds.ranges.xǁRangeBoundsǁto_dict__mutmut_1"]


def test_equivalent_mutants_and_timeouts() -> None:
    """A survivor listed as equivalent leaves the score; a timeout is a kill; packages sum their modules."""
    ms = _script()
    text = "\n".join(
        [
            "    icdl.construct.check.stream.x_slot_error__mutmut_1: survived",
            "    icdl.construct.check.stream.x_slot_error__mutmut_2: survived",
            "    icdl.construct.check.stream.x_slot_error__mutmut_3: timeout",
            "    icdl.construct.bounds.budget.x__zero__mutmut_1: killed",
            "    icdl.construct.bounds.budget.x__zero__mutmut_2: no tests",
        ]
    )
    table = ms.parse(text, frozenset({"icdl.construct.check.stream.x_slot_error__mutmut_1"}))
    s = table["icdl.construct.check.stream"]
    assert (s["equivalent"], s["survived"], s["timeout"]) == (1, 1, 1)
    assert ms.score(s) == 1 / 2
    pkg = ms.packages(table)["icdl.construct"]
    assert (pkg["killed"], pkg["timeout"], pkg["survived"], pkg["no_tests"], pkg["equivalent"]) == (
        1,
        1,
        1,
        1,
        1,
    )
    assert ms.score(pkg) == 2 / 4
