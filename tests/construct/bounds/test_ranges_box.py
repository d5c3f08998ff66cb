"""`--range auto` with a box: the two prompts of issue 29 that were refused now resolve (the interval bound,
which grows like (K B)^N over box-wide weight intervals, is capped at BOX_CAP_FACTOR times the exact GD
trajectory's maxima, and the verdict's (b) checks the construction stays in range); a refusal with a box never
advises adding a box; a fitter failure on an automatic range names `--range auto`; a fixed range's (b)
failure suggests `--range auto`."""

from __future__ import annotations

import pytest

from icdl.construct import GDConfig, compile_gd_transformer, sample_task, verify
from icdl.construct.bounds.ranges import BOX_CAP_FACTOR, auto_ranges, trajectory_bounds
from icdl.construct.compile import sample_task_info
from icdl.construct.variants.registry import get_variant
from icdl.errors import InputError
from icdl.nets import NetSpec

# icdl construct --variant rows ... --projection box --range auto (issue 29, item 3)
ISSUE = [
    (
        NetSpec(5, 6, 5, 3, activation="softplus"),
        dict(n=12, steps=9, lr=0.024, eps=0.0076, box=1.94, seed=1000),
    ),
    (NetSpec(4, 6, 1, 2, activation="softplus"), dict(n=14, steps=12, lr=0.1, eps=1e-3, box=1.0, seed=1001)),
]


def _auto(spec: NetSpec, o: dict):
    t = sample_task_info(spec, o["n"], seed=o["seed"], lr=o["lr"], steps=o["steps"], box=o["box"])
    prompt = (t.x, t.y, t.x_query, t.w0)
    cfg = GDConfig.create(
        spec, lr=o["lr"], steps=o["steps"], n=o["n"], eps=o["eps"], projection="box", box=o["box"],
        radius="auto", variant="rows", prompt=prompt,
    )  # fmt: skip
    return cfg, prompt


@pytest.mark.parametrize("spec, o", ISSUE)
def test_the_refused_box_prompts_resolve_and_stay_in_range(spec: NetSpec, o: dict) -> None:
    cfg, prompt = _auto(spec, o)
    exact = trajectory_bounds(
        spec, "squared", lr=o["lr"], steps=o["steps"], box=o["box"], x=prompt[0], y=prompt[1],
        x_query=prompt[2], w0=prompt[3],
    )  # fmt: skip
    needs = get_variant("rows").range_needs
    need = exact.bound(needs.quantities)
    assert cfg.auto_range and need <= cfg.radius <= BOX_CAP_FACTOR * need * 1.01 + 1.0  # not 5e4 or refused
    model = compile_gd_transformer(cfg)
    rep = verify(model, *prompt, lipschitz_iters=0)
    assert rep.out_of_range_count == 0 and rep.failures == []


def test_a_refusal_with_a_box_does_not_advise_a_box() -> None:
    spec = NetSpec(3, 4, 2, 1, activation="softplus")
    x, y, xq, w0, _ = sample_task(spec, 6, seed=0)
    with pytest.raises(InputError) as e:  # a limit below every bound: refused, whatever the box
        auto_ranges(
            spec, "squared", lr=0.1, steps=3, box=0.5, x=x, y=y, x_query=xq, w0=w0, eps=1e-3, limit=1e-3
        )
    msg = str(e.value)
    assert "--projection box" not in msg and "--box B" not in msg and "a smaller --box" in msg
    assert "\n" not in msg
    with pytest.raises(InputError) as e:  # without a box, adding one is the first advice
        auto_ranges(
            spec, "squared", lr=0.1, steps=3, box=None, x=x, y=y, x_query=xq, w0=w0, eps=1e-3, limit=1e-3
        )
    assert "--projection box --box B" in str(e.value)


def test_a_fitter_failure_on_an_automatic_range_names_it() -> None:
    spec = NetSpec(2, 2, 2, 1, activation="softplus")
    x, y, xq, w0, _ = sample_task(spec, 4, seed=0)
    prompt = (3000 * x, y, 3000 * xq, w0)  # |z| in the thousands: R = 5750
    with pytest.raises(InputError) as e:
        compile_gd_transformer(spec, steps=0, n=4, eps=1e-8, radius="auto", prompt=prompt)
    assert "too small for softplus" in str(e.value) and "set by --range auto" in str(e.value)
    with pytest.raises(InputError) as e:  # an R the user gave is not said to be automatic
        compile_gd_transformer(spec, steps=0, n=4, eps=1e-8, radius=5750.0)
    assert "--range auto" not in str(e.value)


def test_a_fixed_range_failure_suggests_auto() -> None:
    spec = NetSpec(3, 8, 4, 1)  # icdl construct --variant softmax at its defaults: (b) fails at R = 10
    x, y, xq, w0, _ = sample_task(spec, 32, seed=0)
    rep = verify(
        compile_gd_transformer(spec, steps=5, n=32, variant="softmax"), x, y, xq, w0, lipschitz_iters=0
    )
    (b,) = [f for f in rep.failures if f.startswith("(b) range")]
    assert "--range auto" in b
