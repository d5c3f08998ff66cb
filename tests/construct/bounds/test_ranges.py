"""``--range auto`` (icdl.construct.bounds.ranges): the a-priori bounds hold along the construction's own
trajectory.

Independent references: the surrogate recursion (the paper's p̄, r̄', ū, s̄ with the fitted sums, which the
verifier checks every compiled sublayer against) run step by step as plain GD, and the compiled models
themselves (their weights read after every block, every variant).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icdl.construct.bounds.ranges import DEFAULT_NEEDS, auto_ranges, trajectory_bounds
from icdl.construct.check.verify import recursion, verify
from icdl.construct.compile import GDConfig, compile_gd_transformer, sample_task_info
from icdl.construct.engine.terms import activation_terms, loss_terms
from icdl.construct.variants import softmax
from icdl.construct.variants.registry import get_variant
from icdl.errors import InputError
from icdl.nets import NetSpec, lemma1_terms, projected_step

SRC = str(Path(__file__).resolve().parents[3] / "src")


def _tokens(x, y, xq):  # type: ignore[no-untyped-def]
    x_all = torch.cat([x, xq[None]])
    y_all = torch.cat([y, torch.zeros(1, y.shape[1], dtype=y.dtype)])
    t = torch.ones(x_all.shape[0], dtype=x.dtype)
    t[-1] = 0.0
    return x_all, y_all, t


class _Max:
    """Largest |value| seen per quantity."""

    def __init__(self) -> None:
        self.m: dict[str, float] = {}

    def see(self, name: str, values: list[torch.Tensor] | torch.Tensor) -> None:
        vs = values if isinstance(values, list) else [values]
        v = max(float(t.abs().max()) for t in vs if t.numel())
        self.m[name] = max(self.m.get(name, 0.0), v)


def _see_terms(obs: _Max, pre, p, u, s, last: bool) -> None:  # type: ignore[no-untyped-def]
    obs.see("z", list(pre))
    obs.see("p", list(p[:-1]))
    obs.see("t", p[-1])
    if not last:
        obs.see("u", u)
        obs.see("s", list(s))


def _surrogate_run(spec, loss, *, lr, steps, box, eps, radius, delta, x, y, xq, w0) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Max |.| of z, p, p(N), u, s, w along the surrogate recursion (the paper variant's computation with
    its fitted sums on [-radius, radius]) run as projected GD, every token including the query."""
    r = [
        activation_terms(spec.layer_act(j).name, derivative=False, eps=eps, radius=radius, delta=delta)
        for j in range(1, spec.depth + 1)
    ]
    rp = [
        activation_terms(spec.layer_act(j).name, derivative=True, eps=eps, radius=radius, delta=delta)
        for j in range(1, spec.depth + 1)
    ]
    u = loss_terms(loss, eps=eps, radius=radius)
    x_all, y_all, t = _tokens(x, y, xq)
    obs, w = _Max(), w0
    for l in range(steps + 1):
        g = lemma1_terms(spec, loss, w, x_all, y_all, mask=t, r=r, r_prime=rp, u=u)
        obs.see("w", w)
        _see_terms(obs, g.pre, g.p, g.u, g.s, last=l == steps)
        w = projected_step(w, g.grad, lr, box)
    return obs.m


def _assert_within(bounds: dict[str, float], observed: dict[str, float], what: str) -> None:
    for k, v in observed.items():
        assert v <= bounds[k] * (1 + 1e-9) + 1e-12, (
            f"{what}: observed |{k}| = {v:.6g} > bound {bounds[k]:.6g}"
        )


CASES = [
    # (activation, output, loss, box, lr, steps, w0 scale)
    ("relu", "same", "squared", None, 0.1, 5, 1.0),
    ("relu", "same", "squared", 0.5, 0.3, 4, 2.0),
    ("sigmoid", "same", "squared", None, 0.5, 5, 1.0),
    ("sigmoid", "linear", "huber", 0.7, 0.3, 3, 3.0),
    ("tanh", "same", "squared", None, 0.2, 5, 1.5),
    ("tanh", "linear", "huber", 0.4, 0.5, 4, 1.0),
    ("softplus", "same", "squared", None, 0.1, 4, 1.0),
    ("softplus", "linear", "squared", 0.6, 0.3, 5, 2.0),
]


@pytest.mark.parametrize(("act", "output", "loss", "box", "lr", "steps", "scale"), CASES)
def test_bounds_hold_along_surrogate_gd(act, output, loss, box, lr, steps, scale, assert_nondegenerate):  # type: ignore[no-untyped-def]
    """Over 12 random non-degenerate prompts per case (large initial weights, a box that w0 leaves, large
    step sizes among them): every |z|, |p|, |p(N)|, |u|, |s|, |w| of the construction's recursion (fitted
    sums on the automatic R) is within the a-priori bound."""
    spec = NetSpec(3, 4, 3, 1, activation=act, output=output)
    eps, delta = 1e-3, 1e-9
    for seed in range(12):
        tk = sample_task_info(spec, 10, seed=seed, loss=loss, w0_scale=scale)
        assert_nondegenerate(spec, tk.x, tk.y, tk.w0, loss)
        kw = dict(lr=lr, steps=steps, box=box, x=tk.x, y=tk.y, x_query=tk.x_query, w0=tk.w0)
        auto = auto_ranges(spec, loss, eps=eps, delta=delta, needs=DEFAULT_NEEDS, **kw)  # type: ignore[arg-type]
        b = trajectory_bounds(spec, loss, eps=eps, delta=delta, **kw)  # type: ignore[arg-type]
        obs = _surrogate_run(
            spec,
            loss,
            lr=lr,
            steps=steps,
            box=box,
            eps=eps,
            radius=auto.radius,
            delta=delta,
            x=tk.x,
            y=tk.y,
            xq=tk.x_query,
            w0=tk.w0,
        )
        _assert_within(b.maxima, obs, f"{act}/{loss}/box={box} seed {seed}")
        assert obs["z"] <= auto.radius
        if box is not None:
            assert all(w <= box for w in b.weights[1:])


def _compiled_run(model, x, y, xq, w0) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Max |.| along the compiled model's own trajectory: its weights read after every block, and at each
    the variant's surrogate (softmax: with its products) on every token."""
    H = model.build_prompt(x, y, xq, w0)
    ws = [model.read_weights(H)[0]]
    last = model.sublayers_per_step - 1

    def grab(pt, state):  # type: ignore[no-untyped-def]
        if pt.step is not None and pt.index == last:
            ws.append(model.read_weights(state)[0].clone())

    model.run(H, trace=grab, readout=False)
    x_all, y_all, t = _tokens(x, y, xq)
    cfg, terms, obs = model.config, model.terms, _Max()
    for l, w in enumerate(ws):
        obs.see("w", w)
        if cfg.variant == "softmax":
            prods = softmax.config_products(model.spec, cfg, terms.r_prime)
            sur = softmax.surrogate(model.spec, prods, terms.r, terms.r_prime, terms.u, w, x_all, y_all, t)
            _see_terms(obs, sur.z, sur.p, sur.u, sur.s, last=l == model.steps)
            if l < model.steps:
                obs.see("back", list(sur.back))
        else:
            g = recursion(model, w, x_all, y_all, t, surrogate=True)
            _see_terms(obs, g.pre, g.p, g.u, g.s, last=l == model.steps)
    return obs.m


VARIANT_CASES = [
    (variant, act, box)
    for variant in ("paper", "compact", "no-ewml", "rows", "softmax")
    for act in ("relu", "sigmoid")
    for box in (None, 0.6)
    if not (variant == "no-ewml" and act != "relu")
] + [("softmax", "tanh", None), ("rows", "softplus", 0.6)]  # tanh' peaks at 1: its fitted sum exceeds 1


@pytest.mark.parametrize(("variant", "act", "box"), VARIANT_CASES)
def test_auto_range_in_range_for_every_variant(variant, act, box, assert_nondegenerate):  # type: ignore[no-untyped-def]
    """Every variant compiled with radius="auto": the verifier counts nothing outside the ranges, and the
    compiled model's own trajectory stays within the a-priori bounds."""
    spec = NetSpec(2, 3, 2, 1, activation=act)
    for seed in (3, 4):
        tk = sample_task_info(spec, 6, seed=seed)
        assert_nondegenerate(spec, tk.x, tk.y, tk.w0)
        prompt = (tk.x, tk.y, tk.x_query, tk.w0)
        projection = "none" if box is None else "box"
        cfg = GDConfig.create(
            spec,
            projection=projection,
            box=box,
            lr=0.3,
            steps=3,
            n=6,
            eps=1e-2,
            variant=variant,
            radius="auto",
            prompt=prompt,
        )
        assert cfg.auto_range and isinstance(cfg.radius, float)
        model = compile_gd_transformer(cfg)
        rep = verify(model, *prompt, lipschitz_iters=0)
        assert rep.first_divergence is None
        assert rep.out_of_range_count in (0, None), f"{variant}/{act}/box={box} seed {seed}"
        needs = get_variant(variant).range_needs
        b = trajectory_bounds(
            spec,
            "squared",
            lr=0.3,
            steps=3,
            box=box,
            x=tk.x,
            y=tk.y,
            x_query=tk.x_query,
            w0=tk.w0,
            eps=cfg.eps,
            products=needs.products,
            delta=cfg.delta or 0.0,
        )
        _assert_within(b.maxima, _compiled_run(model, *prompt), f"{variant}/{act}/box={box} seed {seed}")


def test_saved_auto_model_reloads(tmp_path: Path) -> None:
    """The resolved config is plain numbers (R, the weight range, auto_range=True): a saved softmax model
    reloads (store recompiles from the saved config) and reproduces its outputs bit for bit."""
    from icdl.construct.store import load, save

    spec = NetSpec(2, 3, 2, 1, activation="sigmoid")
    tk = sample_task_info(spec, 6, seed=1)
    prompt = (tk.x, tk.y, tk.x_query, tk.w0)
    cfg = GDConfig.create(spec, steps=2, n=6, eps=1e-2, variant="softmax", radius="auto", prompt=prompt)
    assert GDConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.weight_range is not None and cfg.auto_range
    model = compile_gd_transformer(cfg)
    H = model.build_prompt(*prompt)
    back = load(save(model, tmp_path / "auto"))
    assert back.config == cfg
    assert torch.equal(back(H), model(H))


def test_auto_needs_a_prompt() -> None:
    with pytest.raises(InputError, match="needs the prompt"):
        GDConfig.create(NetSpec(2, 3, 2, 1), radius="auto")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "icdl", "construct", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


FINDING_2 = [
    "--variant",
    "softmax",
    "-N",
    "2",
    "-K",
    "3",
    "--in-dim",
    "2",
    "--out-dim",
    "1",
    "-n",
    "24",
    "-L",
    "2",
    "--lr",
    "0.3",
    "--projection",
    "box",
    "--box",
    "0.7",
    "--seed",
    "109",
]


def test_finding_2_in_range_with_auto() -> None:
    """Issue 18, finding 2: at R = 10 and B = 0.7 three kinds of product leave their ranges (w0 is outside
    the box at step 0); with --range auto none does, and the weights follow GD to the products' eps."""
    out = _cli(*FINDING_2, "--range", "auto", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["range_auto"] is True and r["out_of_range_count"] == 0
    assert r["weight_range"] > 0.7 and r["radius"] > 0
    assert r["max_abs_err_weights"] < 1e-3


def test_no_bound_is_one_line_exit_2() -> None:
    """A long unprojected softplus run: the interval bound (each fitted sum allowed its eps) blows up, and
    the command says so in one line before compiling anything."""
    out = _cli(
        *("-N", "3", "-K", "8", "--in-dim", "4", "--out-dim", "1", "-n", "32", "-L", "30"),
        *("--activation", "softplus", "--range", "auto"),
    )
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--range auto" in lines[0] and "--projection box" in lines[0], out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_estimate_gets_the_resolved_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """`icdl construct --range auto` sizes its estimate (which decides refusals) with the resolved ranges:
    the wider of R and the softmax weight range, never the default 10 nor the string "auto"."""
    import icdl.construct.estimate as estimate
    from icdl.cli import main

    seen: dict[str, float] = {}

    def record(spec, **kw):  # type: ignore[no-untyped-def]
        seen["radius"] = kw["radius"]
        raise InputError("stop here")

    monkeypatch.setattr(estimate, "construction_estimate", record)
    with pytest.raises(SystemExit) as exc:
        main(["construct", *FINDING_2, "--range", "auto"])
    assert exc.value.code == 2
    spec = NetSpec(2, 3, 2, 1)
    tk = sample_task_info(spec, 24, seed=109)
    prompt = (tk.x, tk.y, tk.x_query, tk.w0)
    cfg = GDConfig.create(
        spec,
        projection="box",
        box=0.7,
        lr=0.3,
        steps=2,
        n=24,
        variant="softmax",
        radius="auto",
        prompt=prompt,
    )
    assert cfg.weight_range is not None
    assert seen["radius"] == max(cfg.radius, cfg.weight_range) != 10.0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("point", ["none", "a", "b"])
def test_interval_matrix_product_contains_every_product_of_members(seed: int, point: str) -> None:
    """The midpoint-radius product (Rump) of interval matrices contains ``A @ B`` for every member A, B:
    sampled members and corners, centres of both signs (a radius without |centre| is too small there)."""
    from icdl.construct.bounds.ranges import _Iv, _matmul

    g = torch.Generator().manual_seed(seed)

    def iv(rows: int, cols: int, exact: bool) -> _Iv:
        c = torch.randn(rows, cols, generator=g, dtype=torch.float64) * 2
        r = torch.zeros_like(c) if exact else torch.rand(rows, cols, generator=g, dtype=torch.float64)
        return _Iv(c - r, c + r)

    a, b = iv(3, 4, point == "a"), iv(4, 5, point == "b")
    assert bool((a.lo < 0).any()) and bool((b.hi > 0).any())  # centres of both signs
    out = _matmul(a, b)
    assert bool((out.lo <= out.hi).all())
    for _ in range(200):
        corner = torch.rand(2, generator=g) < 0.5
        ta = torch.rand(a.lo.shape, generator=g, dtype=torch.float64)
        tb = torch.rand(b.lo.shape, generator=g, dtype=torch.float64)
        if bool(corner[0]):
            ta = ta.round()
        if bool(corner[1]):
            tb = tb.round()
        A, B = a.lo + ta * (a.hi - a.lo), b.lo + tb * (b.hi - b.lo)
        prod = A @ B
        assert bool((prod >= out.lo - 1e-12).all() and (prod <= out.hi + 1e-12).all())
