"""compile_gd_transformer's keyword options: an explicit, typed signature whose defaults are GDConfig's, and
a typo answered with the nearest option name (issue 19, finding 5)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import icdl
from icdl.construct import GDConfig, compile_gd_transformer
from icdl.errors import InputError
from icdl.nets import NetSpec

SPEC = NetSpec(2, 2, 2, 1)
OPTIONS = [
    *("loss", "lr", "steps", "n", "eps", "radius", "delta"),
    *("projection", "box", "gate", "variant", "dtype", "prompt"),
]
# GDConfig fields that radius="auto" fills in (not options of their own)
DERIVED = ("weight_range", "auto_range")


def test_signature_lists_every_option_with_gdconfig_defaults() -> None:
    params = inspect.signature(compile_gd_transformer).parameters
    keyword_only = [p for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert [p.name for p in keyword_only] == OPTIONS
    assert all(p.annotation is not inspect.Parameter.empty for p in keyword_only)
    fields = dataclasses.fields(GDConfig)
    defaults = {f.name: f.default for f in fields if f.name not in ("spec", *DERIVED)}
    assert {p.name: p.default for p in keyword_only if p.name not in ("projection", "prompt")} == defaults
    assert params["projection"].default == "none" and params["prompt"].default is None
    assert icdl.compile_gd_transformer is compile_gd_transformer


@pytest.mark.parametrize(
    ("typo", "near"), [("step", "steps"), ("projetion", "projection"), ("learning_rat", None), ("bx", "box")]
)
def test_unknown_keyword_names_the_nearest_option(typo: str, near: str | None) -> None:
    with pytest.raises(InputError) as err:
        compile_gd_transformer(SPEC, n=3, **{typo: 1})
    msg = str(err.value)
    assert f"unknown option {typo!r}" in msg
    if near is not None:
        assert f"did you mean {near!r}?" in msg
    else:  # nothing close: every option is listed
        assert all(o in msg for o in OPTIONS)


def test_gdconfig_create_suggests_too() -> None:
    with pytest.raises(InputError, match="did you mean 'radius'"):
        GDConfig.create(SPEC, radious=2.0)


def test_options_next_to_a_gdconfig_are_refused() -> None:
    cfg = GDConfig(spec=SPEC, steps=2, n=3)
    assert compile_gd_transformer(cfg).config == cfg
    with pytest.raises(InputError, match=r"not both.*steps"):
        compile_gd_transformer(cfg, steps=3)


def test_keywords_reach_the_config() -> None:
    model = compile_gd_transformer(SPEC, lr=0.2, steps=2, n=3, projection="box", box=0.5, dtype="float32")
    c = model.config
    assert (c.lr, c.steps, c.n, c.box, c.projection, c.dtype) == (0.2, 2, 3, 0.5, "box", "float32")
