"""Exceptions shared across icdl.

``InputError`` marks a user mistake (bad option, bad config, impossible network spec). The CLI turns
it into a one-line message on stderr and exit code 2; library callers get an ordinary ``ValueError``.
"""

from __future__ import annotations


class InputError(ValueError):
    """A user-facing input error: reported as one line, exit code 2, never a traceback."""
