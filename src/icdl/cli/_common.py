"""Small helpers shared by the subcommands: JSON output, numeric option types, user errors."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import click

from icdl.errors import InputError


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


def emit_json(obj: Any) -> None:
    """Print one JSON object on stdout (NaN/inf become null, numbers stay numbers)."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    json.dump(clean(obj), sys.stdout, indent=2)
    sys.stdout.write("\n")


def user_error(message: str) -> InputError:
    """Build the exception that the CLI reports as ``icdl: error: <message>`` with exit code 2."""
    return InputError(message)
