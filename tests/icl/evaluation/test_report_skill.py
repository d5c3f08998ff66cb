"""The report's nonlinear-skill line (icdl.icl.evaluation.report._skill_lines)."""

from __future__ import annotations

from icdl.icl.evaluation import report


def test_skill_line_lists_predictors_but_not_the_reference() -> None:
    cond = {
        "predictors": {
            "icl": {"skill_ranges": {"1-30": 0.25, "31-45": -0.125}},
            "ridge_tuned": {"skill_ranges": {"1-30": 0.0, "31-45": 0.0}},
            "averaging": {"r2": [0.0]},
        }
    }
    lines = report._skill_lines(cond)
    assert len(lines) == 2 and lines[1] == ""
    assert "icl 1-30 0.250, 31-45 -0.125" in lines[0]
    assert "ridge_tuned" not in lines[0].split(":", 1)[1] and "averaging" not in lines[0]


def test_no_skill_line_without_ridge_tuned() -> None:
    assert report._skill_lines({"predictors": {"icl": {"r2": [0.0]}}}) == []
