"""The GD-step prompt (paper eq. 3.1, in icdl's named slots): examples, query and the initial weights
written into the tokens of a [`Layout`][icdl.construct.engine.layout.Layout]. Re-exported by
[`icdl.construct.compile`][icdl.construct.compile]."""

from __future__ import annotations

import torch
from torch import Tensor

from icdl.construct.engine.layout import Layout
from icdl.errors import InputError

__all__ = ["build_prompt"]


def build_prompt(
    layout: Layout,
    x: Tensor,
    y: Tensor,
    x_query: Tensor,
    w0: Tensor,
    *,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Build the GD-step prompt ``h_i = [x_i; y_i; w^(0); 0; 1; t_i]`` (slots: docs/construction.md).

    Args:
        layout: the token layout.
        x: ``(n, d_x)`` or ``(B, n, d_x)`` example inputs.
        y: ``(n, d_y)`` or ``(B, n, d_y)`` labels.
        x_query: ``(d_x,)`` or ``(B, d_x)`` query input.
        w0: ``(P,)`` or ``(B, P)`` initial weights, written into every token (any w^(0): the paper's
            w^(0) = 0 is a fixed point for bias-free ReLU networks, docs/nets.md).

    Returns:
        ``(B, a+n+1, D)``: the layout's ``a = prefix_tokens`` tokens of other types (0 in the paper's
        layout), the n examples (t = 1), then the query (t = 0, y = 0).
    """
    spec = layout.spec
    if x.dim() == 2:
        x, y, x_query = x[None], y[None], x_query[None]
    if w0.dim() == 1:
        w0 = w0[None].expand(x.shape[0], -1)
    B, n, dx = x.shape
    if dx != spec.in_dim or y.shape != (B, n, spec.out_dim) or x_query.shape != (B, dx):
        raise InputError(
            f"prompt shapes do not match the network: x {tuple(x.shape)}, y {tuple(y.shape)}, "
            f"x_query {tuple(x_query.shape)} (d_x={spec.in_dim}, d_y={spec.out_dim})"
        )
    if w0.shape != (B, spec.num_params):
        raise InputError(f"w0 must have {spec.num_params} entries per prompt, got shape {tuple(w0.shape)}")
    a = layout.prefix_tokens  # tokens of other types (e.g. weight rows) come first
    H = torch.zeros(B, a + n + 1, layout.dim, dtype=dtype)
    H[:, a : a + n, layout.indices("X")] = x.to(dtype)
    H[:, a + n, layout.indices("X")] = x_query.to(dtype)
    H[:, a : a + n, layout.indices("Y")] = y.to(dtype)
    layout.write_weights(H, w0)
    H[:, a:, layout.index("ONE")] = 1.0
    H[:, a : a + n, layout.index("T")] = 1.0
    return H
