"""icdl.construct.engine.layout: slot addressing, and the documented bounds of ``Layout.index``."""

from __future__ import annotations

import pytest

from icdl.construct.engine.layout import paper_layout
from icdl.nets import NetSpec

SPEC = NetSpec(2, 3, 2, 1)  # P_1 has 3 entries, W has 3*2 + 1*3 = 9


def test_index_addresses_every_entry_of_a_slot_and_nothing_past_it() -> None:
    L = paper_layout(SPEC)
    for name, layer in (("X", None), ("W", None), ("P", 1), ("S", 2), ("ONE", None)):
        s = L.slot(name, layer)
        assert [L.index(name, layer, k) for k in range(s.size)] == L.indices(name, layer)
        assert L.index(name, layer, s.size - 1) == s.offset + s.size - 1
        for k in (s.size, s.size + 1, -1):  # one past the end would be the next slot's first coordinate
            with pytest.raises(IndexError, match=f"outside slot {s.label}"):
                L.index(name, layer, k)


def test_index_of_an_unknown_slot_names_it() -> None:
    L = paper_layout(SPEC)
    with pytest.raises(KeyError, match="P_3"):
        L.index("P", 3)
