"""Small committed R² curves over training seeds: what every ICL claim in the docs cites.

[`collect`][icdl.icl.evaluation.curves.collect] reads the evaluation results ``RUN_DIR/eval/<suite>.json`` of
several runs of ONE configuration that differ only in the training seed
([`icdl.icl.evaluation.evaluate`][icdl.icl.evaluation.evaluate]; all runs see the same test prompts, so a
baseline's curve is the same for every seed) and returns a small JSON object (format ``icdl-curves-v1``): per
suite, condition and predictor

* ``per_seed``: each seed's R²(k), its 90 % prompt-bootstrap band and its nonlinear skill(k)
  ([`metrics.nonlinear_skill`][icdl.icl.metrics.nonlinear_skill], against ``ridge_tuned``);
* ``mean``, ``seed_min``, ``seed_max``, ``seed_std``: R²(k) averaged over seeds and its spread over
  seeds (the training-seed band);
* ``band_low``, ``band_high``: the envelope of the seeds' prompt-bootstrap bands (lowest low, highest
  high) — a band over seeds AND prompts;
* ``skill_mean``, ``skill_seed_min``, ``skill_seed_max``: the same for the nonlinear skill;
* ``ranges``: per k range (``1..E`` within the training length, ``E+1..K`` beyond) the mean over k of R²
  and of the skill, per seed and their mean / min / max over seeds.

[`markdown`][icdl.icl.evaluation.curves.markdown] renders the headline tables from that object.
``scripts/curves.py`` evaluates the runs (cached) and writes both under ``docs/results/curves/``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from icdl.errors import InputError
from icdl.icl.evaluation.evaluate import load_result, result_status
from icdl.io import portable_path

__all__ = ["FORMAT", "SHOW_K", "collect", "fill_markers", "headline", "markdown"]

FORMAT = "icdl-curves-v1"
SHOW_K: tuple[int, ...] = (1, 5, 10, 20, 30, 40, 45, 60)
_DIGITS = 4


def _r(v: float | None) -> float | None:
    """Round for a small file; non-finite and missing values are ``None``."""
    if v is None or not math.isfinite(v):
        return None
    return round(float(v), _DIGITS)


def _finite(vals: Sequence[float | None]) -> list[float]:
    return [float(v) for v in vals if v is not None and math.isfinite(v)]


def _across(values: Sequence[Sequence[float | None]], how: str) -> list[float | None]:
    """Per position, ``mean`` / ``min`` / ``max`` / ``std`` over the seeds with a finite value there."""
    out: list[float | None] = []
    for col in zip(*values, strict=True):
        v = _finite(col)
        if not v:
            out.append(None)
        elif how == "std":
            out.append(_r(statistics.pstdev(v)) if len(v) > 1 else 0.0)
        else:
            out.append(_r(statistics.fmean(v) if how == "mean" else (min(v) if how == "min" else max(v))))
    return out


def _range_mean(vals: Sequence[float | None], lo: int, hi: int) -> float | None:
    v = _finite(vals[lo : hi + 1])
    return _r(statistics.fmean(v)) if v else None


def _predictor(per_seed: list[dict[str, Any]], ranges: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Aggregate one predictor's curves over seeds (see the module docstring)."""
    r2 = [s["r2"] for s in per_seed]
    skill = [s["skill"] for s in per_seed if s.get("skill") is not None]
    out: dict[str, Any] = {"prompts": per_seed[0]["prompts"], "per_seed": per_seed}
    for how in ("mean", "min", "max", "std"):
        out["mean" if how == "mean" else f"seed_{how}"] = _across(r2, how)
    out["band_low"] = _across([s["r2_low"] for s in per_seed], "min")
    out["band_high"] = _across([s["r2_high"] for s in per_seed], "max")
    if len(skill) == len(per_seed):
        out["skill_mean"] = _across(skill, "mean")
        out["skill_seed_min"] = _across(skill, "min")
        out["skill_seed_max"] = _across(skill, "max")
    out["ranges"] = {}
    for lo, hi in ranges:
        entry: dict[str, Any] = {}
        for key, curves in (("r2", r2), ("skill", skill if len(skill) == len(per_seed) else [])):
            vals = [_range_mean(c, lo, hi) for c in curves]
            if not curves or any(v is None for v in vals):
                continue
            fv = _finite(vals)
            entry[key] = {
                "per_seed": vals,
                "mean": _r(statistics.fmean(fv)),
                "seed_min": _r(min(fv)),
                "seed_max": _r(max(fv)),
            }
        out["ranges"][f"{lo}-{hi}"] = entry
    return out


def _seed_curve(res: dict[str, Any], curve: dict[str, Any]) -> dict[str, Any]:
    return {
        "seed": res["run"]["train_seed"],
        "prompts": curve.get("num_prompts"),
        "r2": [_r(v) for v in curve["r2"]],
        "r2_low": [_r(v) for v in curve["r2_low"]],
        "r2_high": [_r(v) for v in curve["r2_high"]],
        "skill": None if curve.get("skill") is None else [_r(v) for v in curve["skill"]],
    }


def _suite(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate one suite's results (one per run) condition by condition."""
    conds: dict[str, Any] = {}
    first = results[0]
    for cname, cond in first["conditions"].items():
        ranges = cond["ranges"]
        preds: dict[str, Any] = {}
        for pname in cond["predictors"]:
            per_seed = []
            for res in results:
                c = res["conditions"].get(cname, {}).get("predictors", {}).get(pname)
                if c is None:
                    raise InputError(f"{res['run']['run_dir']}: no {pname!r} curve in condition {cname!r}")
                per_seed.append(_seed_curve(res, c))
            preds[pname] = _predictor(per_seed, ranges)
        kinds = {p: v["meta"].get("kind", p) for p, v in cond["predictors"].items()}
        conds[cname] = {
            "label": cond["label"],
            "points": cond["points"],
            "ranges": ranges,
            "kinds": kinds,
            "predictors": preds,
        }
    return {"prompts": first["suite"]["prompts"], "test_seed": first["suite"]["seed"], "conditions": conds}


def collect(
    name: str, run_dirs: Sequence[str | Path], suites: Sequence[str], *, command: str = ""
) -> dict[str, Any]:
    """The curves object of ``run_dirs`` (the same configuration, different training seeds) on ``suites``.

    Every run must have a current, sealed evaluation of every suite
    ([`result_status`][icdl.icl.evaluation.evaluate.result_status] ``"ok"``) with the same request (suite,
    prompts, test seed, options) — otherwise the seeds would not be comparable;
    [`InputError`][icdl.errors.InputError] names the run and suite that is missing, stale or differs.
    """
    if not run_dirs:
        raise InputError("curves need at least one run")
    out: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "command": command,
        "computed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": [],
        "suites": {},
    }
    for suite in suites:
        results: list[dict[str, Any]] = []
        for rd in run_dirs:
            status = result_status(rd, suite)
            if status != "ok":
                raise InputError(f"{rd}: the evaluation of suite {suite!r} is {status} (run icdl evaluate)")
            res = load_result(rd, suite)
            assert res is not None
            if results and res["request"] != results[0]["request"]:
                raise InputError(
                    f"{rd}: suite {suite!r} was evaluated with another request than {run_dirs[0]}"
                )
            results.append(res)
        out["suites"][suite] = _suite(results)
        if not out["runs"]:
            out["runs"] = [
                {
                    "run_dir": portable_path(rd),
                    "train_seed": r["run"]["train_seed"],
                    "checkpoint_step": r["checkpoint"]["step"],
                    "config_name": r["run"]["name"],
                    "options": r["options"],
                }
                for rd, r in zip(run_dirs, results, strict=True)
            ]
    return out


def _fmt(entry: dict[str, Any] | None) -> str:
    if not entry or entry.get("mean") is None:
        return "–"
    lo, hi = entry["seed_min"], entry["seed_max"]
    return f"{entry['mean']:.3f}" if lo == hi else f"{entry['mean']:.3f} [{lo:.3f}, {hi:.3f}]"


def markdown(curves: dict[str, Any], *, show_k: Sequence[int] = SHOW_K) -> str:
    """Headline tables of a curves object: per suite and condition, each predictor's mean R² over each k
    range (seed mean [min, max]), its nonlinear skill there, and the seed-mean R² at a few k."""
    seeds = [r["train_seed"] for r in curves["runs"]]
    lines = [
        f"### {curves['name']}: {len(seeds)} training seed(s) {seeds}",
        "",
        f"Generated by `{curves['command']}`; numbers from `{curves['name']}.json` (R² mean over k, "
        "seed mean [min, max] over training seeds; baselines see the same test prompts for every seed).",
    ]
    for sname, suite in curves["suites"].items():
        for cname, cond in suite["conditions"].items():
            ranges = [f"{lo}-{hi}" for lo, hi in cond["ranges"]]
            n = cond["points"]
            ks = [k for k in show_k if k < n]
            head = [f"R² k={r}" for r in ranges] + [f"skill k={r}" for r in ranges] + [f"k={k}" for k in ks]
            lines += ["", f"**{sname} / {cname}** ({cond['label']}; {suite['prompts']} test prompts)", ""]
            lines += ["| predictor | prompts | " + " | ".join(head) + " |", "|---" * (len(head) + 2) + "|"]
            for pname, p in cond["predictors"].items():
                cells = [_fmt(p["ranges"].get(r, {}).get("r2")) for r in ranges]
                cells += [_fmt(p["ranges"].get(r, {}).get("skill")) for r in ranges]
                cells += ["–" if p["mean"][k] is None else f"{p['mean'][k]:.3f}" for k in ks]
                lines.append(f"| {pname} | {p['prompts']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _pm(entry: dict[str, Any] | None) -> str:
    """``mean`` or ``mean ± half the seed range``."""
    if not entry or entry.get("mean") is None:
        return "–"
    lo, hi = entry["seed_min"], entry["seed_max"]
    return f"{entry['mean']:.3f}" if lo == hi else f"{entry['mean']:.3f} ± {(hi - lo) / 2:.3f}"


_LABELS = {
    "ridge_1": "ridge (λ = 1, intercept)",
    "ridge_tuned": "`ridge_tuned`",
    "kernel": "`kernel` (NNGP)",
    "radial": "`radial`",
    "blup": "`blup` (best linear)",
    "mlp_tuned": "`mlp_tuned`",
}


def headline(
    curves: dict[str, Any],
    *,
    suite: str | None = None,
    condition: str | None = None,
    show_k: Sequence[int] = (5, 10, 20, 30, 40),
    short: bool = False,
) -> str:
    """The docs' headline tables of one condition: per predictor the mean R² and mean nonlinear skill over
    each k range (seed mean ± half the seed range) and the seed-mean R² at ``show_k``; then the skill per k
    of ICL and the nonlinear baselines (seed mean [min, max]). ``short``: the k-range columns only.
    Default condition: the first of ``in-distribution`` (else of the first suite)."""
    suites = curves["suites"]
    st = suites[
        suite
        if suite is not None
        else ("in-distribution" if "in-distribution" in suites else next(iter(suites)))
    ]
    cond = st["conditions"][condition if condition is not None else next(iter(st["conditions"]))]
    seeds = len(curves["runs"])
    rs = [f"{lo}-{hi}" for lo, hi in cond["ranges"]]
    ks = [k for k in show_k if k < cond["points"]] if not short else []
    head = [f"R² k={r}" for r in rs] + [f"skill k={r}" for r in rs] + [f"R² k={k}" for k in ks]
    lines = ["| predictor (prompts) | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for name, p in cond["predictors"].items():
        label = f"ICL ({seeds} seed{'s' if seeds > 1 else ''})" if name == "icl" else _LABELS.get(name, name)
        cells = [_pm(p["ranges"][r].get("r2")) for r in rs] + [_pm(p["ranges"][r].get("skill")) for r in rs]
        cells += ["–" if p["mean"][k] is None else f"{p['mean'][k]:.3f}" for k in ks]
        lines.append(f"| {label} ({p['prompts']}) | " + " | ".join(cells) + " |")
    if short:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "| nonlinear skill at k | " + " | ".join(str(k) for k in ks) + " |",
        "|---" * (len(ks) + 1) + "|",
    ]
    for name in ("icl", "kernel", "mlp_tuned"):
        p = cond["predictors"].get(name)
        if p is None or "skill_mean" not in p:
            continue
        cells = []
        for k in ks:
            m, lo, hi = p["skill_mean"][k], p["skill_seed_min"][k], p["skill_seed_max"][k]
            cells.append("–" if m is None else (f"{m:.3f}" if lo == hi else f"{m:.3f} [{lo:.3f}, {hi:.3f}]"))
        lines.append(f"| {'ICL' if name == 'icl' else _LABELS[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fill_markers(text: str, curves: dict[str, Any]) -> str:
    """Replace the body between ``<!-- curves:NAME -->`` and the next ``<!-- /curves -->`` with
    [`headline`][icdl.icl.evaluation.curves.headline] of ``curves`` (whose name is NAME), so the docs' tables
    are regenerated from the committed JSON, never typed. Options after the name, each ``:``-separated:
    ``short`` (the k-range columns only) and ``SUITE/CONDITION`` (that condition instead of the default
    one), e.g. ``<!-- curves:NAME:weight-shift-std/mum0_5:short -->``."""
    pattern = re.compile(
        rf"(<!-- curves:{re.escape(curves['name'])}((?::[^\s:>]+)*) -->\n).*?(<!-- /curves -->)", re.DOTALL
    )

    def table(m: re.Match[str]) -> str:
        opts = [o for o in m.group(2).split(":") if o]
        where = [o for o in opts if "/" in o]
        unknown = [o for o in opts if o != "short" and "/" not in o]
        if unknown or len(where) > 1:
            raise InputError(
                f"curves marker {m.group(1).strip()!r}: options are 'short' and one SUITE/CONDITION"
            )
        suite, condition = where[0].split("/", 1) if where else (None, None)
        if suite is not None and condition not in curves["suites"].get(suite, {}).get("conditions", {}):
            raise InputError(
                f"curves marker {m.group(1).strip()!r}: {curves['name']} has no condition {where[0]}"
            )
        return (
            m.group(1)
            + headline(curves, suite=suite, condition=condition, short="short" in opts)
            + m.group(3)
        )

    return pattern.sub(table, text)
