"""Small helpers shared by the subcommands: JSON output, numeric option types, user errors, the work
budget (``--yes``) and output checks."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from icdl import budget
from icdl.errors import InputError
from icdl.io import check_writable, clean_json
from icdl.threads import Kind, apply_threads

F = TypeVar("F", bound=Callable[..., Any])

# Largest integer any count option accepts: beyond it no size is meaningful and floats overflow.
MAX_COUNT = 10**12
#: ``--seed``: torch and numpy take seeds below 2**63 (a larger one is an overflow, not a seed).
SEED = click.IntRange(0, 2**63 - 1)


class PositiveFloat(click.ParamType):
    """A finite float > 0 (eps, range, learning rate...)."""

    name = "positive float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x) or x <= 0:
            self.fail(f"{value!r} must be a finite number > 0", param, ctx)
        return x


POSITIVE_FLOAT = PositiveFloat()


class RangeOrAuto(PositiveFloat):
    """``--range``: a finite float > 0, or ``auto`` (bounds from the prompt,
    [`icdl.construct.bounds.ranges`][icdl.construct.bounds.ranges])."""

    name = "positive float or auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        return super().convert(value, param, ctx)


RANGE_OR_AUTO = RangeOrAuto()

#: ``icdl construct --range`` default (docs/construction.md, "Ranges": the cost of auto against R = 10).
RANGE_DEFAULT: float | str = 10.0


class Count(click.IntRange):
    """An integer option type in ``[low, high]``; ``--help`` shows ``x>=low`` when the ceiling is only the
    sanity cap `MAX_COUNT` (a real limit would be named; that one is never the reason a value is refused)."""

    def _describe_range(self) -> str:
        if self.max == MAX_COUNT and self.min is not None:
            return f"x>={self.min}"
        return super()._describe_range()


def count(low: int, high: int = MAX_COUNT) -> click.IntRange:
    """An integer option type in ``[low, high]`` (default ceiling `MAX_COUNT`, not shown in ``--help``)."""
    return Count(min=low, max=high)


#: The built-in construction variants, as
# [`icdl.construct.variants.registry.VARIANTS`][icdl.construct.variants.registry] lists  them, named here so
# that ``--help`` shows them without importing torch (tests/cli/test_cli_one_tool.py  checks that they are the
# registry's).
BUILTIN_VARIANTS: tuple[str, ...] = ("paper", "compact", "no-ewml", "rows", "softmax")


class VariantChoice(click.Choice):
    """``--variant`` (``icdl construct``, ``icdl align``): ``--help`` lists `BUILTIN_VARIANTS`; a value is
    checked against the registry [`icdl.construct.variants.registry`][icdl.construct.variants.registry]
    (imported then, with torch), so a variant registered at run time is accepted too."""

    def __init__(self) -> None:
        super().__init__(BUILTIN_VARIANTS, case_sensitive=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.cli import paused_gc

        with paused_gc():  # the first import of torch
            # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
            from icdl.construct.variants.registry import VARIANTS

        self.choices = tuple(VARIANTS)
        return super().convert(value, param, ctx)


def examples(*lines: str) -> str:
    """A command's ``epilog`` for ``--help``: ``Examples:`` and one command line each, printed as written
    (click's ``\\b`` keeps the lines from being rewrapped). tests/cli/test_cli_one_tool.py parses each line
    with its command, so an example cannot name an option that does not exist."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def emit_json(obj: Any) -> None:
    """Print one JSON object on stdout (NaN/inf become null, numbers stay numbers)."""
    json.dump(clean_json(obj), sys.stdout, indent=2)
    sys.stdout.write("\n")


def overrides_option(f: F) -> F:
    """``--set KEY=VALUE`` (repeatable): dotted config keys with YAML values (train and score train)."""
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a config key (dotted key, YAML value), e.g. --set train.steps=500; repeatable.",
    )(f)


def yes_option(f: F) -> F:
    """The ``--yes`` flag: run even when the work estimate is above the limit (see
    [`icdl.budget`][icdl.budget])."""
    return click.option(
        "--yes",
        "-y",
        "yes",
        is_flag=True,
        help="Run even when the memory/time estimate is above the limit (otherwise: exit 2 with it).",
    )(f)


def threads_option(kind: Kind, *, forward: bool = False) -> Callable[[F], F]:
    """The ``--threads N`` option: torch's intra-op threads for the command, chosen by
    [`icdl.threads.apply_threads`][icdl.threads.apply_threads] for work of ``kind`` (``"small"`` or
    ``"large"``) before the command runs. ``forward``: the command also gets ``threads`` (None when not
    given), e.g. to record it in its config."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, threads: int | None = None, **kwargs: Any) -> Any:
            apply_threads(kind, threads)  # imports torch: at run time, never for --help
            if forward:
                kwargs["threads"] = threads
            return fn(*args, **kwargs)

        return click.option(
            "--threads",
            type=count(1, 4096),
            default=None,
            show_default="by the work",
            help="Intra-op threads: 1 for construction work, else the idle cores (env ICDL_THREADS; "
            "docs/benchmarks.md).",
        )(wrapper)  # type: ignore[return-value]

    return decorate


def guard(est: budget.Estimate, yes: bool, *, max_seconds: float | None = None) -> budget.Estimate:
    """Refuse (``InputError``, exit 2, one line with the estimate) work past the limits unless ``yes``.

    ``max_seconds`` replaces `icdl.budget.MAX_SECONDS` for this check (interactive commands use
    [`icdl.budget.QUICK_SECONDS`][icdl.budget.QUICK_SECONDS]).
    """
    return budget.check(est, allow=yes, max_seconds=max_seconds)


def check_output(
    path: str | os.PathLike[str] | None, option: str, *, directory: bool = False, atomic: bool | None = None
) -> None:
    """One line, exit 2, before any work, when ``option``'s output path cannot be written (``atomic``: see
    [`check_writable`][icdl.io.check_writable])."""
    if path is not None:
        check_writable(path, what=option, directory=directory, atomic=atomic)


def user_error(message: str) -> InputError:
    """Build the exception that the CLI reports as ``icdl: error: <message>`` with exit code 2."""
    return InputError(message)


def _apply(f: F, options: list[Callable[[F], F]]) -> F:
    """Apply click option decorators so that ``--help`` lists them in the given order."""
    for option in reversed(options):
        f = option(f)
    return f


def network_options(f: F) -> F:
    """The network spec (``depth, width, in_dim, out_dim, activation, output``) and ``loss``: one
    declaration, the same types, defaults and help in every command that builds a
    [`NetSpec`][icdl.nets.NetSpec] (``construct``, ``theory``). Names are checked by the library."""
    return _apply(
        f,
        [
            click.option(
                "--depth", "-N", type=count(2), default=3, show_default=True, help="Network depth N."
            ),
            click.option(
                "--width", "-K", type=count(1), default=8, show_default=True, help="Hidden width K."
            ),
            click.option("--in-dim", type=count(1), default=4, show_default=True, help="Input dim d_x."),
            click.option("--out-dim", type=count(1), default=1, show_default=True, help="Output dim d_y."),
            click.option(
                "--activation",
                default="relu",
                show_default=True,
                help="relu, sigmoid, tanh, softplus, identity.",
            ),
            click.option("--loss", default="squared", show_default=True, help="squared, huber or logistic."),
            click.option(
                "--output",
                type=click.Choice(["same", "linear"]),
                default="same",
                show_default=True,
                help="Activation at the output layer: same as hidden (paper) or linear.",
            ),
        ],
    )


def relu_sum_options(f: F) -> F:
    """``--eps`` and ``--range``: the target sup error and the interval of the fitted ReLU sums
    ([`icdl.relu_sums`][icdl.relu_sums]) of a smooth activation or a non-squared loss."""
    return _apply(f, _relu_sum_options(POSITIVE_FLOAT, 10.0, "Range [-R, R] of the fitted ReLU sums."))


def relu_sum_options_auto(f: F) -> F:
    """``--eps`` and ``--range R|auto`` (``auto``: R from a-priori bounds on the prompt's GD trajectory,
    [`icdl.construct.bounds.ranges`][icdl.construct.bounds.ranges]), for commands that have a prompt."""
    return _apply(
        f,
        _relu_sum_options(
            RANGE_OR_AUTO,
            RANGE_DEFAULT,
            "Range [-R, R] of the fitted ReLU sums and products, or 'auto': bounds on every argument along "
            "the whole GD trajectory of the prompt (docs/construction.md, 'Ranges').",
        ),
    )


def _relu_sum_options(
    range_type: click.ParamType, default: Any, help_range: str
) -> list[Callable[[Any], Any]]:
    return [
        click.option(
            "--eps",
            type=POSITIVE_FLOAT,
            default=1e-3,
            show_default=True,
            help="Target sup error of each fitted ReLU sum (smooth activations, non-squared losses).",
        ),
        click.option(
            "--range", "radius", type=range_type, default=default, show_default=True, help=help_range
        ),
    ]
