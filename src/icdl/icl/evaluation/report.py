"""A markdown report with PNG plots for one or more evaluated runs, next to the paper's numbers.

``build_report(run_dirs, out_dir)`` reads ``RUN_DIR/eval/<suite>.json``
([`icdl.icl.evaluation.evaluate`][icdl.icl.evaluation.evaluate]), evaluates missing suites on demand
(``evaluate="auto"``: only ``in-distribution``; ``"all"``; ``"none"``; the missing ones are listed with the
command that computes them), renders the plots ([`icdl.icl.evaluation.plots`][icdl.icl.evaluation.plots]) and
writes ``out_dir/report.md`` with, per run and suite:

* R² at selected k and mean R² over ``k = 1..E`` (within the training length E) and ``E+1..K`` (beyond),
  per condition and predictor, with the paper's means over ``k = 1..50`` and ``51..75`` side by side
  (F.1 per attention / target depth / mixture weight and its NN baseline; F.2 weight shifts, 4-layer
  target; [`icdl.paper_results`][icdl.paper_results]);
* a generated statement per baseline and k range: ICL beats / matches / trails it, from the paired
  bootstrap band of the R² difference (matches = the 90 % band contains 0);
* label diagnostics (degenerate conditions), the suite's caveats, and the cost comparison;
* across runs: a summary table and the transformer-depth sweep (F.3) when runs differ only in depth.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from icdl import paper_results as paper
from icdl.errors import InputError
from icdl.icl.evaluation import plots
from icdl.icl.evaluation.evaluate import (
    EvalOptions,
    checkpoint_info,
    depth_sweep,
    evaluate_run,
    load_result,
    result_status,
)
from icdl.icl.suites import suite_names
from icdl.io import atomic_write_text, check_writable, read_text

__all__ = ["REPORT_SUITES", "Report", "build_report", "statements"]

REPORT_SUITES: tuple[str, ...] = (
    "in-distribution",
    "mixture",
    "mixture-prompt",
    "weight-shift",
    "weight-shift-std",
    "long-prompts",
    "centred",
)
Evaluate = Literal["auto", "all", "none"]


@dataclass
class Report:
    """What [`build_report`][icdl.icl.evaluation.report.build_report] wrote: the markdown file, the PNGs, and
    the commands for missing suites."""

    path: Path
    images: list[Path]
    missing: list[str]


def _f(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.{digits}f}"


def _mean(vals: Sequence[float | None], lo: int, hi: int) -> float | None:
    part = [v for v in vals[lo : hi + 1] if v is not None and math.isfinite(v)]
    return sum(part) / len(part) if part else None


def _evaluated_ks(vals: Sequence[float | None], lo: int, hi: int) -> list[int]:
    """The k in ``[lo, hi]`` where a curve has a value (a sparse baseline: the few k it was run at)."""
    return [k for k in range(lo, min(hi, len(vals) - 1) + 1) if _finite_value(vals[k])]


def _finite_value(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def _mean_at(vals: Sequence[float | None], ks: Sequence[int]) -> float | None:
    part = [v for k in ks if k < len(vals) and (v := vals[k]) is not None and math.isfinite(v)]
    return sum(part) / len(part) if part else None


def _sel_ks(train_examples: int, max_k: int) -> list[int]:
    ks = {0, 1, 2, 5, 10, 20, train_examples, max_k}
    return sorted(k for k in ks if 0 <= k <= max_k)


def _slug(s: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in s)


def _paper_setting(config: dict[str, Any]) -> bool:
    """Whether a run was trained on the paper's data: bias-free ReLU targets, inputs N(-2, I), raw labels,
    weights N(0, I)."""
    t = config["task"]
    inputs = t["inputs"]
    return (
        t.get("activation", "relu") == "relu"
        and inputs["kind"] == "gaussian"
        and inputs["mean"] in (-2.0, [-2.0])
        and not inputs["center"]
        and t["standardize"] == "none"
        and t["weight_mean"] == 0.0
    )


def _paper_f1(result: dict[str, Any], cond: dict[str, Any], pname: str, kind: str) -> tuple[str, str]:
    """The paper's (mean 1-50, mean 51-75) for this curve, as strings (``–`` where it has none)."""
    run, suite = result["run"], result["suite"]["name"]
    if not _paper_setting(result["config"]):
        return "–", "–"
    att, depth = run["attention"], run["target_depth"]
    key = None
    if suite in ("in-distribution", "mixture", "mixture-prompt", "long-prompts", "depth"):
        omega = cond["params"].get("omega1", 1.0)
        if kind == "icl":
            key = paper.curve_key(omega)
        elif kind == "mlp-best" and omega == 1.0:
            key = "nn"
        if key is not None:
            return _f(paper.f1_mean(att, depth, key)), _f(paper.f1_mean(att, depth, key, "mean_51_75"))
    if suite in ("weight-shift", "weight-shift-std") and kind in ("icl", "mlp-best"):
        who = "icl" if kind == "icl" else "nn"
        mu = cond["params"].get("weight_mean", 0.0)
        m1, m2 = paper.f2_mean(att, mu, who), paper.f2_mean(att, mu, who, "mean_51_75")
        tag = "" if depth == 4 else "*"
        if m1 is not None:
            return _f(m1) + tag, _f(m2) + tag
    return "–", "–"


def statements(result: dict[str, Any], condition: str) -> list[str]:
    """Plain sentences, one per baseline and k range: where ICL beats / matches / trails it."""
    c = result["conditions"][condition]
    out = []
    for bname, comp in c["comparisons"].items():
        for rng, s in comp["ranges"].items():
            verb = {"beats": "beats", "matches": "matches", "trails": "trails"}[s["verdict"]]
            out.append(
                f"ICL {verb} **{bname}** on k = {rng} (mean ΔR² = {s['mean']:+.3f}, 90% paired band "
                f"[{s['low']:+.3f}, {s['high']:+.3f}]; per k: beats at {s['k_beats']}, matches at "
                f"{s['k_matches']}, trails at {s['k_trails']} of {s['k_evaluated']}; "
                f"{comp['prompts']} prompts)."
            )
    return out


def _suite_section(
    result: dict[str, Any], out_dir: Path, run_slug: str, status: str, fig: tuple[str, int | None]
) -> list[str]:
    suite = result["suite"]
    E = suite["train_examples"]
    lines = [f"### Suite `{suite['name']}`", "", suite["description"] + ".", ""]
    if status == "stale":
        lines += [
            "> **Stale**: the checkpoint is newer than these results; rerun `icdl evaluate --force`.",
            "",
        ]
    conds = result["conditions"]
    # One PNG per suite (the report must stay small): the paper-style panel over conditions, or, for a
    # single-condition suite, every predictor on it.
    png = out_dir / f"{run_slug}__{_slug(suite['name'])}.{fig[0]}"
    if len(conds) > 1:
        img = plots.plot_conditions(result, png, dpi=fig[1])
    else:
        img = plots.plot_predictors(result, next(iter(conds)), png, dpi=fig[1])
    lines += [f"![{suite['name']}]({img.name})", ""]
    for cname, c in conds.items():
        max_k = c["points"] - 1
        ranges = [tuple(r) for r in c["ranges"]]
        ks = _sel_ks(E, max_k)
        lines += [f"**{c['label']}** (`{cname}`; {max_k} examples per test prompt)", ""]
        head = [
            "predictor",
            *[f"k={k}" for k in ks],
            *[f"mean {a}–{b}" for a, b in ranges],
            "paper 1–50",
            "paper 51–75",
        ]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        sparse_notes: list[str] = []
        icl_r2 = c["predictors"].get("icl", {}).get("r2")
        for pname, curve in c["predictors"].items():
            kind = curve.get("meta", {}).get("kind", "")
            r2 = curve["r2"]
            p1, p2 = _paper_f1(result, c, pname, kind)
            means = []
            for a, b in ranges:
                at = _evaluated_ks(r2, a, b)
                sparse = 0 < len(at) < b - a + 1
                means.append(_f(_mean(r2, a, b)) + ("†" if sparse else ""))
                if sparse and icl_r2 is not None:
                    sparse_notes.append(
                        f"{pname} on k = {a}–{b} is the mean over k = {', '.join(map(str, at))} only; "
                        f"ICL over the same k: {_f(_mean_at(icl_r2, at))}."
                    )
            cells = [pname, *[_f(r2[k]) for k in ks], *means, p1, p2]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        if sparse_notes:
            lines += ["† compare at matching k: " + " ".join(sparse_notes), ""]
        lines += _skill_lines(c)
        d = c["diagnostics"]
        diag = (
            f"Labels: mean {_f(d['label_mean'], 3)}, std {_f(d['label_std'], 3)} "
            f"({_f(d['label_std_ratio'], 2)}x the training task), {100 * d['zero_fraction']:.2f}% exactly 0."
        )
        if d["degenerate"]:
            diag = "**DEGENERATE** (" + "; ".join(d["reasons"]) + "): R² here is not meaningful. " + diag
        lines += [diag, ""]
        sts = statements(result, cname)
        if sts:
            lines += [f"- {s}" for s in sts] + [""]
    notes = [w for w in result.get("warnings", [])]
    if notes:
        lines += ["Caveats:", ""] + [f"- {w}" for w in notes] + [""]
    if suite["name"] in ("weight-shift", "weight-shift-std") and result["run"]["target_depth"] != 4:
        lines += ["\\* the paper's F.2 numbers are for a 4-layer target.", ""]
    return lines


def _skill_lines(cond: dict[str, Any]) -> list[str]:
    """Nonlinear skill (1 - MSE / MSE of ridge_tuned, docs/baselines.md) per predictor and k range, when
    the evaluation ran ``ridge_tuned``; nothing otherwise."""
    rows = [
        f"{pname} " + ", ".join(f"{r} {_f(v)}" for r, v in curve["skill_ranges"].items())
        for pname, curve in cond["predictors"].items()
        if curve.get("skill_ranges") and pname != "ridge_tuned"
    ]
    if not rows:
        return []
    return ["Nonlinear skill vs ridge_tuned (1 − MSE / MSE_ridge_tuned, mean over k): " + "; ".join(rows), ""]


def _cost_section(cost: dict[str, Any]) -> list[str]:
    icl, mlp = cost["icl"], cost["mlp"]
    return [
        "#### Cost: one ICL forward pass vs training the baseline network on the prompt",
        "",
        f"Prompts of {cost['points']} points (k = {cost['examples']}), batch of {cost['prompts']} prompts, "
        f"{cost['threads']} thread(s) on {cost['device']}.",
        "",
        "| | parameters | FLOPs per prompt | measured s per batch | s per prompt |",
        "|---|---|---|---|---|",
        f"| ICL forward (2·N·T, T = points) | {icl['num_params']:,} | {icl['flops_rule_points']:.3g} "
        f"| {icl['seconds_batch']:.4f} | {icl['seconds_per_prompt']:.2e} |",
        f"| ICL forward (exact matmul count, T = 2·points tokens) | | {icl['flops_exact']:.3g} | | |",
        f"| {mlp['depth']}-layer width-{mlp['width']} MLP, {mlp['epochs']} epochs (6·P·D) "
        f"| {mlp['num_params']:,} | {mlp['flops_rule']:.3g} | {mlp['seconds_batch']:.4f} "
        f"| {mlp['seconds_per_prompt']:.2e} |",
        "",
        f"Training the MLP costs {cost['flops_ratio_rule']:.3g}x the ICL forward FLOPs (rules) and took "
        f"{_f(cost['seconds_ratio'], 1)}x its wall time here, for ONE k (the ICL pass serves every k). "
        f"Paper (App. A.3): {paper.FLOPS['icl_gflops']} vs {paper.FLOPS['direct_training_gflops']} GFLOP "
        f"({paper.FLOPS['icl_rule']}; {paper.FLOPS['direct_rule']}).",
        "",
    ]


def _depth_section(rows: list[dict[str, Any]], out_dir: Path, fig: tuple[str, int | None]) -> list[str]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["attention"], r["target_depth"]), []).append(r)
    sweep = [r for g in groups.values() if len({x["layers"] for x in g}) >= 2 for r in g]
    if not sweep:
        return []
    img = plots.plot_depth_sweep(sweep, out_dir / f"depth_sweep.{fig[0]}", dpi=fig[1])
    lines = ["## Transformer depth sweep (F.3)", "", f"![depth sweep]({img.name})", ""]
    lines += [
        "| attention | target depth | layers | k | R² [90% band] | paper (k = 15/30/45, same layers) |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(sweep, key=lambda r: (r["attention"], r["target_depth"], r["layers"])):
        for i, k in enumerate(r["ks"]):
            pk = (15, 30, 45)[i] if len(r["ks"]) == 3 else None
            same = "task" not in r or _paper_setting({"task": r["task"]})  # the paper's numbers only there
            pv = paper.F3.get((r["attention"], pk), {}).get(r["layers"]) if pk and same else None
            lines.append(
                f"| {r['attention']} | {r['target_depth']} | {r['layers']} | {k} | {_f(r['r2'][i])} "
                f"[{_f(r['r2_low'][i])}, {_f(r['r2_high'][i])}] | {_f(pv)} |"
            )
    return [*lines, ""]


def _summary_row(rd: Path, run: dict[str, Any], res: dict[str, Any]) -> str:
    """The run's row of the in-distribution summary table (ICL, averaging, MLP at matching k, paper)."""
    c = res["conditions"]["train"]
    E = res["suite"]["train_examples"]
    by_kind = {p["meta"].get("kind"): p for p in c["predictors"].values()}

    def m(kind: str, by_kind: dict[str, Any] = by_kind, E: int = E) -> str:
        p = by_kind.get(kind)
        return _f(_mean(p["r2"], 1, E)) if p else "–"

    # The MLP runs at a few k only: its mean is comparable with ICL's over THOSE k only.
    mlp = by_kind.get("mlp-best")
    mlp_ks = _evaluated_ks(mlp["r2"], 1, E) if mlp else []

    def at(kind: str, by_kind: dict[str, Any] = by_kind, ks: list[int] = mlp_ks) -> str:
        p = by_kind.get(kind)
        return _f(_mean_at(p["r2"], ks)) if p and ks else "–"

    same = _paper_setting(res["config"])
    p_icl = paper.f1_mean(run["attention"], run["target_depth"], "1.0") if same else None
    p_nn = paper.f1_mean(run["attention"], run["target_depth"], "nn") if same else None
    return (
        f"| `{rd}` | {run['attention']} | {run['layers']} | {run['target_depth']} | {m('icl')} | "
        f"{m('averaging')} | {', '.join(map(str, mlp_ks)) or '–'} | {at('icl')} | "
        f"{at('averaging')} | "
        f"{at('mlp-best')} | {at('mlp-last')} | {_f(p_icl)} | {_f(p_nn)} |"
    )


_SUMMARY_HEAD = (
    "## Summary (in-distribution, mean R² over k = 1..E)",
    "",
    "| run | attention | layers | target depth | ICL | averaging | MLP k | ICL at MLP k "
    "| averaging at MLP k | MLP best | MLP last | paper ICL 1–50 | paper NN 1–50 |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
)


def _check_report_args(
    run_dirs: Sequence[str | Path], suites: Sequence[str] | None, figure_format: str, evaluate: str
) -> list[str]:
    """Validate [`build_report`][icdl.icl.evaluation.report.build_report]'s arguments (one-line InputErrors);
    returns the suites to report."""
    if not run_dirs:
        raise InputError("give at least one run directory")
    out = list(REPORT_SUITES if suites is None else suites)
    for s in out:
        if s not in suite_names():
            raise InputError(f"unknown suite {s!r}; choose one of {', '.join(suite_names())}")
    if figure_format not in ("png", "pdf", "svg"):
        raise InputError(f"figure format must be png, pdf or svg, got {figure_format!r}")
    if evaluate not in ("auto", "all", "none"):
        raise InputError(f"evaluate must be auto, all or none, got {evaluate!r}")

    for rd in run_dirs:
        checkpoint_info(rd)  # one-line error for a bad run directory, before any work
    return out


def _loss_section(rd: Path, out_dir: Path, run_slug: str, fig: tuple[str, int | None]) -> list[str]:
    """The training-loss figure of a run from its ``metrics.jsonl`` (nothing when it has no log)."""
    log = rd / "metrics.jsonl"
    if not log.is_file():
        return []
    records = []
    for line in read_text(log, what="metrics log").splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict) and "step" in rec and "loss" in rec:
                records.append(rec)
    if not records:
        return []
    path = out_dir / f"{run_slug}__training-loss.{fig[0]}"
    img = plots.plot_training_loss(records, path, title=f"{rd.name}: training loss", dpi=fig[1])
    last = records[-1]
    return [
        f"![training loss]({img.name})",
        "",
        f"Training loss at step {last['step']}: {last['loss']:.3g} (label variance "
        f"{_f(last.get('y_var'), 3)}; "
        f"`{log.name}`, {len(records)} logged intervals).",
        "",
    ]


def _run_header(rd: Path, run: dict[str, Any], cfg: dict[str, Any], step: int) -> list[str]:
    """The heading and one-line description of a run's section."""
    return [
        f"## Run `{rd}`",
        "",
        f"{run['attention']} attention, {run['layers']} layers, d_model {cfg['model']['d_model']}; "
        f"target: {run['target_depth']}-layer {cfg['task']['activation']} network, "
        f"width {cfg['task']['width']}, "
        f"d = {cfg['task']['dim']}, inputs mean {cfg['task']['inputs']['mean']}; trained "
        f"{cfg['train']['steps']} steps on {run['train_examples']} examples (checkpoint step "
        f"{step}).",
        "",
    ]


def build_report(
    run_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    suites: Sequence[str] | None = None,
    evaluate: Evaluate = "auto",
    prompts: int | None = None,
    options: EvalOptions | None = None,
    progress: bool | None = None,
    figure_format: str = "png",
    dpi: int | None = None,
) -> Report:
    """Render ``out_dir/report.md`` and its figures for ``run_dirs``.

    ``figure_format``: ``png`` (default), ``pdf`` or ``svg``; ``dpi``: figure resolution (default
    [`DEFAULT_DPI`][icdl.icl.evaluation.plots.DEFAULT_DPI]).

    ``evaluate``: ``"auto"`` computes a missing ``in-distribution`` suite only, ``"all"`` every missing or
    stale suite in ``suites``, ``"none"`` nothing (missing suites are listed with the command to run).
    """
    suites = _check_report_args(run_dirs, suites, figure_format, evaluate)
    fig = (figure_format, dpi)
    check_writable(out_dir, what="report folder", directory=True)
    out = Path(out_dir)
    with _created_or_removed(out):
        return _build(run_dirs, out, suites, evaluate, prompts, options, progress, fig)


@contextlib.contextmanager
def _created_or_removed(out: Path) -> Iterator[None]:
    """Create ``out`` if it does not exist, and remove it again (with what was written into it) when the
    report fails, e.g. on a damaged checkpoint: a failed report leaves no empty or partial folder behind.
    A folder that existed before is left in place."""
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise


def _build(
    run_dirs: Sequence[str | Path],
    out: Path,
    suites: list[str],
    evaluate: Evaluate,
    prompts: int | None,
    options: EvalOptions | None,
    progress: bool | None,
    fig: tuple[str, int | None],
) -> Report:
    """The body of [`build_report`][icdl.icl.evaluation.report.build_report], into the existing folder
    ``out``."""
    lines = ["# icdl evaluation report", ""]
    lines += [
        "R²(k) across test prompts at each number of in-context examples k (pooled over prompts unless "
        "stated), 90% bootstrap bands over prompts; baselines share the ICL model's test prompts "
        "(the MLP and GD baselines a prefix of them). Paper columns: "
        f"{paper.PROVENANCE}; the paper's ranges are k = 1–50 / 51–75 with 50 training examples, ours "
        "k = 1–E / E+1–K with E training examples.",
        "",
    ]
    summary = list(_SUMMARY_HEAD)
    body: list[str] = []
    missing: list[str] = []
    for rd in run_dirs:
        rd = Path(rd)
        results: dict[str, tuple[dict[str, Any], str]] = {}
        for s in suites:
            status = result_status(rd, s)
            if status != "ok" and (evaluate == "all" or (evaluate == "auto" and s == "in-distribution")):
                res = evaluate_run(rd, s, prompts=prompts, options=options, progress=progress, force=True)
                results[s] = (res, "ok")
            elif status != "missing":
                results[s] = (load_result(rd, s) or {}, status)
            else:
                missing.append(f"icdl evaluate {rd} --suite {s}")
        if not results:
            continue
        any_res = next(iter(results.values()))[0]
        run = any_res["run"]
        slug = _slug(rd.name or "run")
        cfg = any_res["config"]
        body += _run_header(rd, run, cfg, any_res["checkpoint"]["step"])
        body += _loss_section(rd, out, slug, fig)
        for res, status in results.values():
            body += _suite_section(res, out, slug, status, fig)
        cost = next((r["cost"] for r, _ in results.values() if r.get("cost")), None)
        if cost:
            body += _cost_section(cost)
        if "in-distribution" in results:
            summary.append(_summary_row(rd, run, results["in-distribution"][0]))
    lines += [*summary, ""]
    rows = depth_sweep(run_dirs, evaluate_missing=False)
    lines += _depth_section(rows, out, fig)
    lines += body
    if missing:
        lines += ["## Not evaluated", "", "Run these (or `icdl report --evaluate all`):", ""]
        lines += [f"- `{cmd}`" for cmd in missing] + [""]
    path = atomic_write_text(out / "report.md", "\n".join(lines))
    images = sorted(out / ln.split("](", 1)[1].rstrip(")") for ln in lines if ln.startswith("!["))
    return Report(path, images, missing)
