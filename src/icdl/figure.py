"""The figure every icdl plot helper returns: a ``matplotlib.figure.Figure`` that shows itself in Jupyter.

icdl builds figures without pyplot, so that drawing never chooses or switches the caller's backend. A
figure made that way belongs to no backend, and IPython shows a Figure as an image only once a matplotlib
backend has registered its formatter (``%matplotlib inline`` does; from matplotlib 3.9 on, importing pyplot
no longer does, since the backend loads lazily): in a plain kernel such a figure printed as
``<Figure size 581x334 with 2 Axes>``. [`IcdlFigure`][icdl.figure.IcdlFigure] adds ``_repr_png_``, the
method IPython's display machinery asks every object for, so the figure is a PNG in any notebook, with or
without the magic (where a backend registered a formatter, IPython uses that one instead). Nothing here
sets a backend or imports pyplot.

This module imports matplotlib, so ``import icdl`` does not import it; the plot modules do.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from icdl.errors import InputError
from icdl.io import atomic_write

__all__ = ["FIGURE_FORMATS", "IcdlFigure", "new_figure", "save_figure", "subplots"]

#: the formats `save_figure` writes, picked by the file's suffix
FIGURE_FORMATS = (".png", ".pdf", ".svg")


class IcdlFigure(Figure):
    """A ``matplotlib.figure.Figure`` with ``_repr_png_`` (IPython's rich display): shown inline as PNG by
    any Jupyter kernel; everything else is matplotlib's ``Figure``."""

    def _repr_png_(self) -> bytes:
        """The figure as PNG bytes (IPython's default inline options: ``bbox_inches="tight"``)."""
        buf = io.BytesIO()
        self.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()


def new_figure(**kwargs: Any) -> IcdlFigure:
    """``IcdlFigure(**kwargs)`` (``figsize=...``): a figure attached to no backend."""
    return IcdlFigure(**kwargs)


def subplots(*args: Any, figsize: tuple[float, float], **kwargs: Any) -> tuple[IcdlFigure, Any]:
    """``(figure, axes)`` like ``pyplot.subplots`` but without pyplot: an
    [`IcdlFigure`][icdl.figure.IcdlFigure]
    registered with no backend, so it needs no closing and leaves the caller's backend as it was. Every icdl
    plot helper draws on one (the icl, inspect and diffusion plots)."""
    fig = new_figure(figsize=figsize)
    return fig, fig.subplots(*args, **kwargs)


def save_figure(fig: Figure, path: str | Path, dpi: int = 150, **savefig: Any) -> Path:
    """Write ``fig`` atomically to ``path`` (its directory created when missing); the suffix (``.png``,
    ``.pdf``, ``.svg``) picks the format. ``dpi`` in [10, 2400]; ``savefig`` goes to ``Figure.savefig``
    (e.g. ``bbox_inches="tight"``). A bad suffix or dpi is an [`InputError`][icdl.errors.InputError]."""
    path = Path(path)
    fmt = path.suffix.lower()
    if fmt not in FIGURE_FORMATS:
        formats = ", ".join(FIGURE_FORMATS)
        raise InputError(
            f"cannot write {str(path)!r}: figure format {path.suffix or '(none)'}; use {formats}"
        )
    if not isinstance(dpi, int) or isinstance(dpi, bool) or not 10 <= dpi <= 2400:
        raise InputError(f"dpi must be an integer in [10, 2400], got {dpi!r}")
    return atomic_write(path, lambda fh: fig.savefig(fh, format=fmt[1:], dpi=dpi, **savefig), binary=True)
