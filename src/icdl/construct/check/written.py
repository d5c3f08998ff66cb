"""What the streaming check ([`icdl.construct.check.stream`][icdl.construct.check.stream]) compares after a
sublayer that was run in place ([`Written`][icdl.construct.engine.kernels.Written]): such a sublayer changed
only the positions it added into, so of the coordinates outside the named slots on the named tokens only those
it wrote can differ from the state before, and the state before is the state after with the written positions'
old values put back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class WrittenMap:
    """One sublayer's written positions ``idx`` (flat, into ``H.reshape(-1)``), resolved against one
    prompt element's ``(T, D)`` state and the check's named region, as indices into ``idx``:

    - the positions in batch element 0 (the one the check reads) of its ``size`` = T x D entries: ``own()``,
      computed when needed (only a failing check restores the state before);
    - ``outside``: those outside the named slots on the named tokens (they must keep their value), and
      ``outside_pos`` = ``idx[outside]``;
    - ``inside``: those inside the measured group's gather (rows x the group's column spans) that no
      expected value overwrites there (``covered``), and ``inside_dst``: their flat positions in that gather.
    """

    idx: Tensor
    size: int
    outside: Tensor
    outside_pos: Tensor
    inside: Tensor
    inside_dst: Tensor

    @staticmethod
    def build(
        idx: Tensor,
        shape: tuple[int, int],
        named_rows: slice,
        named_cols: Sequence[slice],
        group_rows: slice,
        group_spans: Sequence[slice],
        covered: Sequence[tuple[slice, slice]] = (),
    ) -> WrittenMap:
        """The map of ``idx`` for a ``(T, D)`` state whose named region is ``named_rows`` x ``named_cols``
        and whose measured group gathers ``group_rows`` x ``group_spans`` (side by side, in order), of which
        the ``(rows, columns)`` blocks ``covered`` (in the gather's coordinates) get expected values."""
        T, D = shape
        pos = idx.to(torch.long)
        own = torch.nonzero(pos < T * D).view(-1)
        own_pos = pos[own]
        named = torch.zeros(T, D, dtype=torch.bool)
        for cols in named_cols:
            named[named_rows, cols] = True
        outside = own[~named.view(-1)[own_pos]]
        colmap = torch.full((D,), -1, dtype=torch.long)
        c = 0
        for sp in group_spans:
            width = len(range(D)[sp])
            colmap[sp] = torch.arange(c, c + width)
            c += width
        lo, hi, _ = group_rows.indices(T)
        r, col = own_pos // D - lo, colmap[own_pos % D]
        keep = (r >= 0) & (r < hi - lo) & (col >= 0)
        placed = torch.zeros(hi - lo, c, dtype=torch.bool)
        for rows, cols in covered:
            placed[rows, cols] = True
        keep[keep.clone()] = ~placed[r[keep], col[keep]]
        return WrittenMap(idx, T * D, outside, pos[outside], own[keep], (r * c + col)[keep])

    def own(self) -> Tensor:
        """The indices into ``idx`` of the positions in batch element 0."""
        return torch.nonzero(self.idx.to(torch.long) < self.size).view(-1)

    def kept(self, S: Tensor, before: Tensor) -> bool:
        """Whether every written position outside the named region holds its old value, bit for bit
        (``==`` as floats: a NaN never equals, so it is measured)."""
        got = S.reshape(-1).index_select(0, self.outside_pos)
        return bool(torch.equal(got, before.index_select(0, self.outside)))

    def restore(self, S: Tensor, before: Tensor) -> Tensor:
        """The state before the sublayer: a copy of ``S (T, D)`` with the written positions' old values."""
        prev = S.clone(memory_format=torch.contiguous_format)
        own = self.own()
        prev.view(-1).index_put_((self.idx.to(torch.long)[own],), before.index_select(0, own))
        return prev

    def patch(self, gathered: Tensor, before: Tensor) -> None:
        """Put the old values back into a gather of the group's slots of the state after (in place), where
        no expected value overwrites them."""
        if self.inside.numel():
            gathered.view(-1).index_put_((self.inside_dst,), before.index_select(0, self.inside))
