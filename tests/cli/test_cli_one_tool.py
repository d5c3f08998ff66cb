"""``icdl`` reads as one tool: every command's ``--help`` answers without importing torch, shows examples
that parse, true ranges, one default style and plain text; the CLI's written-out defaults are the
library's."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from icdl.cli import COMMANDS, cli

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _paths() -> list[tuple[str, ...]]:
    """Every command path: ``()`` for ``icdl`` itself, each command, and each subcommand of a group."""
    out: list[tuple[str, ...]] = [()]
    for name in COMMANDS:
        out.append((name,))
        cmd = cli.get_command(click.Context(cli), name)
        if isinstance(cmd, click.Group):
            out += [(name, sub) for sub in cmd.list_commands(click.Context(cmd))]
    return out


PATHS = _paths()


def _resolve(path: tuple[str, ...]) -> tuple[click.Command, click.Context]:
    cmd: click.Command = cli
    ctx = click.Context(cli, info_name="icdl")
    for name in path:
        assert isinstance(cmd, click.Group)
        sub = cmd.get_command(ctx, name)
        assert sub is not None, path
        cmd, ctx = sub, click.Context(sub, info_name=name, parent=ctx)
    return cmd, ctx


def _help(path: tuple[str, ...]) -> str:
    cmd, ctx = _resolve(path)
    return cmd.get_help(ctx)


_FRESH = """
import sys
from icdl.cli import main
try:
    main(sys.argv[1:] + ["--help"])
except SystemExit:
    pass
sys.stdout.write("\\nTORCH-IMPORTED=%s\\n" % ("torch" in sys.modules))
"""


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "icdl")
def test_help_without_torch_shows_examples(path: tuple[str, ...]) -> None:
    """In a fresh interpreter (the test process has torch loaded already): ``icdl ... --help`` prints its
    help with an example and never imports torch (a second or more of import before the help)."""
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-c", _FRESH, *path], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith("Usage: icdl"), r.stdout[:200]
    assert re.search(r"Examples:\n\s+icdl ", r.stdout), r.stdout
    assert r.stdout.rstrip().endswith("TORCH-IMPORTED=False"), f"icdl {' '.join(path)} --help imported torch"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "icdl")
def test_examples_parse(path: tuple[str, ...]) -> None:
    """Each example line names its own command and parses with it: options exist, values convert."""
    text = _help(path)
    lines = text.split("Examples:\n", 1)[1].splitlines()
    examples = [ln.strip() for ln in lines if ln.strip().startswith("icdl")]
    assert examples, text
    for line in examples:
        argv = shlex.split(line)[1:]
        assert tuple(argv[: len(path)]) == path, line
        if "--help" in argv:
            continue
        cmd, parent = _resolve(tuple(argv[: len(path)]))
        rest = argv[len(path) :]
        if isinstance(cmd, click.Group):  # an example of a group runs one of its subcommands
            sub = cmd.get_command(parent, rest[0])
            assert sub is not None, line
            cmd, rest = sub, rest[1:]
        cmd.make_context(cmd.name, rest, parent=parent)  # raises on an unknown option or a bad value


def _options(path: tuple[str, ...]) -> list[click.Option]:
    cmd, _ = _resolve(path)
    return [p for p in cmd.params if isinstance(p, click.Option)]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "icdl")
def test_help_true_ranges_one_default_style_plain_text(path: tuple[str, ...]) -> None:
    text = _help(path)
    assert "1000000000000" not in text  # the sanity cap is no one's real limit; real minimums are shown
    assert "-1000000000000" not in text
    assert "`" not in text, "rST/markdown markup in --help"
    for opt in _options(path):
        # a default is shown by click as [default: ...], never written into the help text as [...] (an
        # interval such as [-R, R] is not a default)
        assert not re.search(r"\[(?!-?\w+, ?-?\w+\])[^\]]*\]\.?\s*$", opt.help or ""), (
            path,
            opt.opts,
            opt.help,
        )
        assert "(default" not in (opt.help or ""), (path, opt.opts, opt.help)


def test_evaluate_shows_real_minimums() -> None:
    text = _help(("evaluate",))
    assert "x>=10" in text  # --resamples
    assert "x>=2" in text and "x>=1" in text


def test_train_help_lists_every_preset() -> None:
    from icdl.config import list_presets

    text = " ".join(_help(("train",)).split())
    presets = list_presets()
    assert len(presets) >= 7
    for name in presets:
        assert name in text.replace("- ", "-"), name  # click may wrap after a hyphen


def test_theory_and_construct_share_short_options() -> None:
    def shorts(path: tuple[str, ...]) -> dict[str, str]:
        return {o.name or "": s for o in _options(path) for s in o.opts if len(s) == 2}

    theory, construct = shorts(("theory",)), shorts(("construct",))
    for name in ("depth", "width", "steps", "examples"):
        assert theory[name] == construct[name], name
    defaults = [_defaults(p)["examples"] for p in (("theory",), ("construct",), ("score", "construct"))]
    assert len(set(defaults)) == 1, defaults  # one default for n wherever it is an option


def test_align_variant_is_a_choice() -> None:
    (opt,) = [o for o in _options(("align",)) if o.name == "variant"]
    assert isinstance(opt.type, click.Choice)
    from icdl.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["align", "no-such-run", "--variant", "nonsense"])
    assert exc.value.code == 2


def test_report_accepts_suite_as_well_as_suites() -> None:
    (opt,) = [o for o in _options(("report",)) if o.name == "suites"]
    assert "--suite" in opt.opts and "--suites" in opt.opts


def test_builtin_variants_are_the_registry() -> None:
    from icdl.cli._common import BUILTIN_VARIANTS
    from icdl.construct.variants.registry import VARIANTS

    assert tuple(VARIANTS)[: len(BUILTIN_VARIANTS)] == BUILTIN_VARIANTS


def _defaults(path: tuple[str, ...]) -> dict[str, object]:
    return {o.name or "": o.default for o in _options(path)}


def test_evaluate_defaults_and_minimums_are_eval_options() -> None:
    """The CLI writes EvalOptions' defaults and lower bounds out (so --help needs no torch): each default is
    EvalOptions' own, each shown minimum is accepted by EvalOptions and one below it is refused."""
    import dataclasses

    from icdl.errors import InputError
    from icdl.icl.evaluation.evaluate import POOLINGS, EvalOptions

    fields = {f.name: f.default for f in dataclasses.fields(EvalOptions)}
    checked = 0
    for opt in _options(("evaluate",)):
        if opt.name not in fields:
            continue
        checked += 1
        assert opt.default == fields[opt.name], opt.name
        if isinstance(opt.type, click.IntRange):
            low = opt.type.min
            assert low is not None
            EvalOptions(**{opt.name: low})
            with pytest.raises(InputError):
                EvalOptions(**{opt.name: low - 1})
    assert checked >= 9
    (pool,) = [o for o in _options(("evaluate",)) if o.name == "pooling"]
    assert isinstance(pool.type, click.Choice) and tuple(pool.type.choices) == POOLINGS


def test_align_defaults_are_align_options() -> None:
    from icdl.cli import align as align_cli
    from icdl.icl.analysis.align import DEFAULT_BASELINES, AlignOptions

    d, a = _defaults(("align",)), AlignOptions()
    assert d["prompts"] == a.prompts
    assert d["baselines"] == ",".join(DEFAULT_BASELINES)
    assert d["compiled_prompts"] == a.compiled_prompts
    assert d["compiled_max_steps"] == a.compiled_max_steps
    assert d["variant"] == a.compiled_variant
    assert (a.gd_lrs, a.gd_steps, a.gd_inits) == (align_cli.GD_LRS, align_cli.GD_STEPS, align_cli.GD_INITS)
