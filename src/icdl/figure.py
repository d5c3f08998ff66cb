"""The figure every icdl plot helper returns: a ``matplotlib.figure.Figure`` that shows itself in Jupyter.

icdl builds figures without pyplot, so that drawing never chooses or switches the caller's backend. A
figure made that way belongs to no backend, and IPython shows a Figure as an image only once a matplotlib
backend has registered its formatter (``%matplotlib inline`` does; from matplotlib 3.9 on, importing pyplot
no longer does, since the backend loads lazily): in a plain kernel such a figure printed as
``<Figure size 581x334 with 2 Axes>``. [`IcdlFigure`][icdl.figure.IcdlFigure] adds ``_repr_png_``, the
method IPython's display machinery asks every object for, so the figure is a PNG in any notebook, with or
without the magic (where a backend registered a formatter, IPython uses that one instead). Nothing here
sets a backend or imports pyplot.

This module imports matplotlib: import it inside the function that draws (``import icdl`` stays light).
"""

from __future__ import annotations

import io
from typing import Any

from matplotlib.figure import Figure

__all__ = ["IcdlFigure", "new_figure"]


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
