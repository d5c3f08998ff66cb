"""Exceptions shared across icdl.

``InputError`` marks a user mistake (bad option, bad config, impossible network spec). The CLI turns
it into a one-line message on stderr and exit code 2; library callers get an ordinary ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class InputError(ValueError):
    """A user-facing input error: reported as one line, exit code 2, never a traceback."""


def reject_unknown_keywords(unknown: Mapping[str, object], known: Iterable[str], where: str) -> None:
    """Raise [`InputError`][icdl.errors.InputError] for the first keyword of ``unknown`` (if any), naming the
    closest of ``known`` (difflib, as the CLI does for config keys): ``unknown option 'step' of f (did you
    mean 'steps'?)``."""
    import difflib

    for key in unknown:
        near = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]!r}?)" if near else f"; options: {', '.join(known)}"
        raise InputError(f"unknown option {key!r} of {where}{hint}")
