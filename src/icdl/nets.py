"""The paper's bias-free N-layer network, its losses, the Lemma 1 gradient terms and reference GD.

Everything here is batched over independent *tasks*: a weight vector ``w`` of shape ``(*tasks, P)``
goes with inputs ``x`` of shape ``(*tasks, n, d_x)`` and labels ``y`` of shape ``(*tasks, n, d_y)``.
Any device and floating dtype work; use float64 to check constructions.

Conventions (paper Definition 1 / Definition 10, Lemma 1):

* widths ``n_0 = d_x, n_1 = ... = n_{N-1} = K, n_N = d_y``; ``V_j`` has shape ``(n_j, n_{j-1})``;
* ``p(0) = x``, ``p(j) = r(V_j p(j-1))`` — no biases, and r is applied at the output layer too
  (``output="same"``, the paper) unless ``output="linear"`` (an option, not in the paper);
* the flat parameter vector ``w`` is the row-major concatenation of ``V_1 .. V_N`` (eq. 3.2), exactly
  what ``torch.cat([V.flatten() for V in Vs])`` gives;
* the empirical risk is ``L_n(w) = (1/(2n)) sum_i l(f(w, x_i), y_i)`` (eq. 2.2) with the squared loss
  ``l(t, y) = ||t - y||^2``, so ``u(t, y) = 2 (t - y)``.

Note (docs/paper.md, erratum E14): the paper starts GD from ``w^(0) = 0``. For a bias-free ReLU network
that point is a fixed point — every activation and every gradient is exactly zero — and for sigmoid
it never breaks the permutation symmetry of the hidden units. Every function here therefore takes an
arbitrary ``w^(0)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import torch
from torch import Tensor

from icdl.errors import InputError

__all__ = [
    "ACTIVATIONS",
    "LOSSES",
    "Activation",
    "DerivativeProduct",
    "GradTerms",
    "Loss",
    "NetSpec",
    "TransposeProduct",
    "backward_deltas",
    "empirical_risk",
    "flatten",
    "forward",
    "gradient",
    "init_weights",
    "lemma1_terms",
    "project",
    "projected_step",
    "reference_gd",
    "unflatten",
]

OutputKind = Literal["same", "linear"]


# --------------------------------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Activation:
    """A scalar activation r with its derivative r' (both element-wise on tensors)."""

    name: str
    fn: Callable[[Tensor], Tensor]
    deriv: Callable[[Tensor], Tensor]
    lipschitz: float  # L_r: Lipschitz constant of r on R
    deriv_lipschitz: float  # L_{r'}: Lipschitz constant of r' on R (inf where r' jumps)


def _relu_deriv(t: Tensor) -> Tensor:
    # r'(0) = 0, the convention of PyTorch's ReLU backward (and of the delta-step in relu_sums).
    return (t > 0).to(t.dtype)


def _sigmoid_deriv(t: Tensor) -> Tensor:
    s = torch.sigmoid(t)
    return s * (1 - s)


def _tanh_deriv(t: Tensor) -> Tensor:
    return 1 - torch.tanh(t) ** 2


def _softplus(t: Tensor) -> Tensor:
    # log(1 + e^t) without F.softplus's linear cut-off at t > 20, so autograd's r' is sigmoid(t) exactly.
    return torch.logaddexp(t, torch.zeros_like(t))


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation("relu", torch.relu, _relu_deriv, 1.0, math.inf),
    # sigmoid'' peaks at 1/(6 sqrt 3); tanh'' at 4/(3 sqrt 3); softplus'' = sigmoid' <= 1/4.
    "sigmoid": Activation("sigmoid", torch.sigmoid, _sigmoid_deriv, 0.25, 1 / (6 * math.sqrt(3))),
    "tanh": Activation("tanh", torch.tanh, _tanh_deriv, 1.0, 4 / (3 * math.sqrt(3))),
    "softplus": Activation("softplus", _softplus, torch.sigmoid, 1.0, 0.25),
    "identity": Activation("identity", lambda t: t, torch.ones_like, 1.0, 0.0),
}


def get_activation(name: str) -> Activation:
    """Look up an activation by name; unknown names are a user error."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise InputError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}") from None


# --------------------------------------------------------------------------------------------------
# Losses: l(t, y) per sample (summed over output coordinates) and u(t, y) = dl/dt (Definition 3)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Loss:
    """A per-sample loss ``l(t, y)`` (summed over the d_y coordinates) and ``u = dl/dt``.

    ``separable`` says whether ``u(t, y)[k]`` depends only on ``(t[k], y[k])`` — then the loss-derivative
    MLP of Lemma 4 needs a two-argument sum of ReLUs per coordinate (paper (C.13)).
    """

    name: str
    value: Callable[[Tensor, Tensor], Tensor]  # (..., d_y) x (..., d_y) -> (...)
    deriv: Callable[[Tensor, Tensor], Tensor]  # (..., d_y) x (..., d_y) -> (..., d_y)
    deriv_lipschitz: float  # L_l: Lipschitz constant of u in t
    separable: bool = True


HUBER_DELTA = 1.0


def _huber_value(t: Tensor, y: Tensor) -> Tensor:
    # Scaled to agree with ||t - y||^2 on |t - y| <= delta (so u = 2 clamp(t - y)).
    r = (t - y).abs()
    d = HUBER_DELTA
    return torch.where(r <= d, r**2, 2 * d * r - d**2).sum(-1)


def _huber_deriv(t: Tensor, y: Tensor) -> Tensor:
    return 2 * (t - y).clamp(-HUBER_DELTA, HUBER_DELTA)


def _logistic_value(t: Tensor, y: Tensor) -> Tensor:
    # Labels y in {-1, +1}: l = log(1 + exp(-y t)).
    z = -y * t
    return torch.logaddexp(z, torch.zeros_like(z)).sum(-1)


def _logistic_deriv(t: Tensor, y: Tensor) -> Tensor:
    return -y * torch.sigmoid(-y * t)


LOSSES: dict[str, Loss] = {
    "squared": Loss("squared", lambda t, y: ((t - y) ** 2).sum(-1), lambda t, y: 2 * (t - y), 2.0),
    "huber": Loss("huber", _huber_value, _huber_deriv, 2.0),
    # u(t, y) = -y sigmoid(-y t) is not linear in (t, y): it needs the two-argument ReLU sum.
    "logistic": Loss("logistic", _logistic_value, _logistic_deriv, 0.25),
}


def get_loss(name: str) -> Loss:
    """Look up a loss by name; unknown names are a user error."""
    try:
        return LOSSES[name]
    except KeyError:
        raise InputError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}") from None


# --------------------------------------------------------------------------------------------------
# Network specification and parameter layout
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NetSpec:
    """Shape of the paper's N-layer network (Definition 1 / 10).

    Attributes:
        depth: N >= 2, the number of weight matrices (N-1 hidden layers plus the output layer).
        width: K >= 1, the hidden width.
        in_dim: d_x >= 1.
        out_dim: d_y >= 1.
        activation: name of r (see ``ACTIVATIONS``).
        output: ``"same"`` applies r at the output layer (the paper); ``"linear"`` does not.
    """

    depth: int
    width: int
    in_dim: int
    out_dim: int
    activation: str = "relu"
    output: OutputKind = "same"
    _act: Activation = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, value, low in (
            ("depth", self.depth, 2),
            ("width", self.width, 1),
            ("in_dim", self.in_dim, 1),
            ("out_dim", self.out_dim, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InputError(f"network {name} must be an integer >= {low}, got {value!r}")
        if self.output not in ("same", "linear"):
            raise InputError(f"output must be 'same' or 'linear', got {self.output!r}")
        object.__setattr__(self, "_act", get_activation(self.activation))

    # -- sizes ------------------------------------------------------------------------------------
    # widths, shapes and offsets are cached (the spec is frozen): the compiler asks for them once per
    # weight entry it places
    @cached_property
    def widths(self) -> tuple[int, ...]:
        """``(n_0, n_1, ..., n_N) = (d_x, K, ..., K, d_y)``."""
        return (self.in_dim, *([self.width] * (self.depth - 1)), self.out_dim)

    @cached_property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        """Shapes ``(n_j, n_{j-1})`` of ``V_1 .. V_N``."""
        w = self.widths
        return tuple((w[j], w[j - 1]) for j in range(1, self.depth + 1))

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        """``(D_0, D_1, ..., D_N)``: parameters in the first j layers (Definition 2 / Lemma 15)."""
        out = [0]
        for rows, cols in self.shapes:
            out.append(out[-1] + rows * cols)
        return tuple(out)

    @property
    def num_params(self) -> int:
        """``D_N = (d_x + d_y) K + (N - 2) K^2`` (eq. 3.2, Lemma 15), in closed form (O(1) in N)."""
        return (self.in_dim + self.out_dim) * self.width + (self.depth - 2) * self.width**2

    @property
    def num_units(self) -> int:
        """``sum_{j>=1} n_j = (N-1) K + d_y``: the size of p, r', s (docs/paper.md, token layout),
        in closed form (O(1) in N)."""
        return (self.depth - 1) * self.width + self.out_dim

    def to_dict(self) -> dict[str, Any]:
        """The six fields, JSON-ready (reports, ledgers)."""
        return {
            "depth": self.depth,
            "width": self.width,
            "in_dim": self.in_dim,
            "out_dim": self.out_dim,
            "activation": self.activation,
            "output": self.output,
        }

    # -- activations ------------------------------------------------------------------------------
    @property
    def act(self) -> Activation:
        return self._act

    def layer_act(self, j: int) -> Activation:
        """Activation of layer j (1-based); the output layer is linear when ``output="linear"``."""
        if j == self.depth and self.output == "linear":
            return ACTIVATIONS["identity"]
        return self._act


def unflatten(spec: NetSpec, w: Tensor) -> list[Tensor]:
    """Split ``w: (*tasks, P)`` into ``[V_1, ..., V_N]``, ``V_j`` of shape ``(*tasks, n_j, n_{j-1})``."""
    if w.shape[-1] != spec.num_params:
        raise ValueError(f"w has {w.shape[-1]} entries, the network has {spec.num_params} parameters")
    D = spec.offsets
    return [w[..., D[j] : D[j + 1]].reshape(*w.shape[:-1], *spec.shapes[j]) for j in range(spec.depth)]


def flatten(spec: NetSpec, mats: list[Tensor]) -> Tensor:
    """Inverse of [`unflatten`][icdl.nets.unflatten]: row-major concatenation of ``V_1 .. V_N`` (eq. 3.2)."""
    if len(mats) != spec.depth:
        raise ValueError(f"expected {spec.depth} matrices, got {len(mats)}")
    for j, (m, shape) in enumerate(zip(mats, spec.shapes, strict=True), start=1):
        if tuple(m.shape[-2:]) != shape:
            raise ValueError(f"V_{j} has shape {tuple(m.shape[-2:])}, expected {shape}")
    return torch.cat([m.flatten(-2) for m in mats], dim=-1)


def init_weights(
    spec: NetSpec,
    batch_shape: tuple[int, ...] = (),
    *,
    generator: torch.Generator | None = None,
    mean: float = 0.0,
    std: float = 1.0,
    fan_in_scaling: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Draw ``w`` with i.i.d. entries ``N(mean, std^2)``; with ``fan_in_scaling`` layer j's block is
    multiplied by ``sqrt(2 / n_{j-1})`` (He scaling). Returns shape ``(*batch_shape, P)``."""
    z = torch.randn((*batch_shape, spec.num_params), generator=generator, dtype=dtype, device=device or "cpu")
    w = mean + std * z
    if fan_in_scaling:
        D = spec.offsets
        scale = torch.cat(
            [
                torch.full((D[j + 1] - D[j],), math.sqrt(2.0 / spec.shapes[j][1]), dtype=dtype)
                for j in range(spec.depth)
            ]
        ).to(w.device)
        w = w * scale
    return w


# --------------------------------------------------------------------------------------------------
# Forward pass and the Lemma 1 terms
# --------------------------------------------------------------------------------------------------


def _check_batch(spec: NetSpec, w: Tensor, x: Tensor, y: Tensor | None = None) -> None:
    if x.shape[-1] != spec.in_dim:
        raise ValueError(f"x has last dim {x.shape[-1]}, the network expects d_x = {spec.in_dim}")
    if y is not None and y.shape[-1] != spec.out_dim:
        raise ValueError(f"y has last dim {y.shape[-1]}, the network expects d_y = {spec.out_dim}")
    if w.shape[-1] != spec.num_params:
        raise ValueError(f"w has {w.shape[-1]} entries, the network has {spec.num_params} parameters")


def forward(spec: NetSpec, w: Tensor, x: Tensor) -> Tensor:
    """``f(w, x) = p(N)`` (eq. 3.1): ``w (*tasks, P)``, ``x (*tasks, n, d_x)`` -> ``(*tasks, n, d_y)``."""
    _check_batch(spec, w, x)
    p = x
    for j, V in enumerate(unflatten(spec, w), start=1):
        p = spec.layer_act(j).fn(p @ V.transpose(-1, -2))
    return p


@dataclass
class GradTerms:
    """The named intermediate terms of one GD step (Lemma 1, Definitions 2-3), batched over tasks.

    Lists are indexed by layer: element ``j-1`` belongs to layer ``j`` (``j = 1..N``), except ``p``,
    whose element ``j`` is ``p(j)`` with ``p[0] = x``. Per-example tensors have shape
    ``(*tasks, n, n_j)``.

    Attributes:
        pre: pre-activations ``z(j) = V_j p(j-1)``.
        p: activations ``p(0) = x, p(1), ..., p(N)`` (eq. 3.3).
        r_prime: ``r'(z(j))`` — the paper's ``r'_i(j-1)`` (Definition 2).
        u: loss derivative ``u(p(N), y)`` (Definition 3), ``(*tasks, n, d_y)``.
        s: deltas ``s(j)`` (eq. 3.6), ``s(N) = r'(N-1) ⊙ u``, ``s(j) = r'(j-1) ⊙ V_{j+1}^T s(j+1)``.
        A: per-layer gradient matrices ``(1/(2n)) sum_i s_i(j) p_i(j-1)^T`` (eq. 3.5 and 3.7),
            shape ``(*tasks, n_j, n_{j-1})``; row k is the gradient for ``v_{jk}``.
        grad: ``∇L_n(w)``, the row-major concatenation of ``A``, shape ``(*tasks, P)``.
        back: the vectors multiplied into ``r'``: ``back[N-1] = u``, ``back[j-1] = V_{j+1}^T s(j+1)``
            ([`backward_deltas`][icdl.nets.backward_deltas]); empty where not kept.
    """

    pre: list[Tensor]
    p: list[Tensor]
    r_prime: list[Tensor]
    u: Tensor
    s: list[Tensor]
    A: list[Tensor]
    grad: Tensor
    back: list[Tensor] = field(default_factory=list)

    def first_rows(self, n: int) -> GradTerms:
        """The terms of the first ``n`` rows, for terms computed with a ``mask`` of 1 on those rows and 0 on
        the others ([`lemma1_terms`][icdl.nets.lemma1_terms]; e.g. n examples and a query token): the
        per-example tensors cut to ``(*tasks, n, n_j)`` (views), ``A`` and ``grad`` kept, since a masked row
        has ``s = 0`` and adds exact zeros to them (up to the summation order of the matrix products). Where
        ``grad`` is not finite, a masked row's non-finite ``p`` (its 0 times inf is NaN) may be why: then
        ``A`` is summed over the n rows again."""

        def cut(ts: list[Tensor]) -> list[Tensor]:
            return [t[..., :n, :] for t in ts]

        p, s = cut(self.p), cut(self.s)
        A, grad = self.A, self.grad
        if not bool(torch.isfinite(grad).all()):
            A = [sj.transpose(-1, -2) @ pj / (2 * n) for sj, pj in zip(s, p[:-1], strict=True)]
            grad = torch.cat([a.flatten(-2) for a in A], dim=-1)
        u = self.u[..., :n, :]
        pre, rp, back = cut(self.pre), cut(self.r_prime), cut(self.back)
        return GradTerms(pre=pre, p=p, r_prime=rp, u=u, s=s, A=A, grad=grad, back=back)


def lemma1_terms(
    spec: NetSpec,
    loss: Loss | str,
    w: Tensor,
    x: Tensor,
    y: Tensor,
    *,
    mask: Tensor | None = None,
    r: Sequence[Callable[[Tensor], Tensor]] | None = None,
    r_prime: Sequence[Callable[[Tensor], Tensor]] | None = None,
    u: Callable[[Tensor, Tensor], Tensor] | None = None,
) -> GradTerms:
    """Compute every term of Lemma 1 (eqs. 3.5-3.7) explicitly, without autograd.

    Args:
        spec: the network.
        loss: a [`Loss`][icdl.nets.Loss] or its name.
        w: ``(*tasks, P)`` parameters.
        x: ``(*tasks, n, d_x)`` inputs.
        y: ``(*tasks, n, d_y)`` labels.
        mask: optional ``(n,)`` 0/1 weights of the rows: ``u`` is multiplied by it and ``n`` is its sum, so
            rows with 0 (a query token) get ``u = s = 0`` and add nothing to the gradient.
        r, r_prime: optional per-layer replacements of the activation and its derivative (index j-1 for
            layer j), e.g. the ReLU sums of a construction (paper (C.6), (3.20)).
        u: optional replacement of the loss derivative ``u(p(N), y)``.
    """
    loss = get_loss(loss) if isinstance(loss, str) else loss
    _check_batch(spec, w, x, y)
    n = x.shape[-2] if mask is None else int(mask.sum().item())
    Vs = unflatten(spec, w)
    pre: list[Tensor] = []
    ps: list[Tensor] = [x]
    rp: list[Tensor] = []
    for j, V in enumerate(Vs, start=1):
        z = ps[-1] @ V.transpose(-1, -2)
        act = spec.layer_act(j)
        pre.append(z)
        ps.append((act.fn if r is None else r[j - 1])(z))
        rp.append((act.deriv if r_prime is None else r_prime[j - 1])(z))
    uu = (loss.deriv if u is None else u)(ps[-1], y)
    if mask is not None:
        uu = uu * mask[..., None]
    s, back = backward_deltas(rp, uu, Vs)
    A = [s[j].transpose(-1, -2) @ ps[j] / (2 * n) for j in range(spec.depth)]
    grad = flatten(spec, A)
    return GradTerms(pre=pre, p=ps, r_prime=rp, u=uu, s=s, A=A, grad=grad, back=back)


#: ``transpose(j, V_{j+1}, s(j+1))``: the product ``V_{j+1}^T s(j+1)`` per row, for layer j = N-1..1.
TransposeProduct = Callable[[int, Tensor, Tensor], Tensor]
#: ``derivative(j, r'(j-1), m)``: the product ``r' ⊙ m`` of layer j = N..1.
DerivativeProduct = Callable[[int, Tensor, Tensor], Tensor]


def backward_deltas(
    r_prime: Sequence[Tensor],
    u: Tensor,
    Vs: Sequence[Tensor],
    *,
    transpose: TransposeProduct | None = None,
    derivative: DerivativeProduct | None = None,
) -> tuple[list[Tensor], list[Tensor]]:
    """The backward recursion of Lemma 1 (eq. 3.6): ``s(N) = r'(N-1) ⊙ u``,
    ``s(j) = r'(j-1) ⊙ V_{j+1}^T s(j+1)``, with pluggable products.

    The one recursion behind [`lemma1_terms`][icdl.nets.lemma1_terms] (exact products), the softmax
    construction's surrogate (approximate products,
    [`icdl.construct.variants.softmax`][icdl.construct.variants.softmax]) and the rows construction's deltas
    ([`icdl.construct.variants.rows`][icdl.construct.variants.rows]). ``transpose`` defaults to ``s @ V`` and
    ``derivative`` to ``r' * m``.

    Returns:
        ``(s, back)``: per layer j (index j-1) the delta ``s(j)`` and the vector multiplied into ``r'``
        (``back[N-1] = u``, ``back[j-1] = V_{j+1}^T s(j+1)``).
    """
    N = len(Vs)
    s: list[Tensor] = [torch.empty(0)] * N
    back: list[Tensor] = [torch.empty(0)] * N

    def times(j: int, rp: Tensor, m: Tensor) -> Tensor:
        return rp * m if derivative is None else derivative(j, rp, m)

    back[N - 1] = u
    s[N - 1] = times(N, r_prime[N - 1], u)
    for j in range(N - 1, 0, -1):  # layers N-1 .. 1 (0-based index j-1)
        back[j - 1] = s[j] @ Vs[j] if transpose is None else transpose(j, Vs[j], s[j])
        s[j - 1] = times(j, r_prime[j - 1], back[j - 1])
    return s, back


def projected_step(w: Tensor, grad: Tensor, lr: float, box: float | None) -> Tensor:
    """One step of eq. (2.3): ``Proj_W(w - lr * grad)`` ([`project`][icdl.nets.project]; the identity without
    a box)."""
    return project(w - lr * grad, box)


def empirical_risk(spec: NetSpec, loss: Loss | str, w: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """``L_n(w) = (1/(2n)) sum_i l(f(w, x_i), y_i)`` (eq. 2.2), shape ``(*tasks,)``."""
    loss = get_loss(loss) if isinstance(loss, str) else loss
    return loss.value(forward(spec, w, x), y).mean(-1) / 2


def gradient(spec: NetSpec, loss: Loss | str, w: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """``∇L_n(w)`` by Lemma 1, shape ``(*tasks, P)``."""
    return lemma1_terms(spec, loss, w, x, y).grad


# --------------------------------------------------------------------------------------------------
# Reference (projected) gradient descent
# --------------------------------------------------------------------------------------------------


def project(w: Tensor, box: float | None) -> Tensor:
    """``Proj_W`` for the box ``W = {|w_c| <= box}`` (identity when ``box`` is None).

    The paper's W is a product of l2 balls per row (eq. 3.4), which no one-hidden-layer ReLU MLP
    computes exactly; the box is convex (so Lemma 14 still applies) and *is* such an MLP
    (docs/paper.md, sublayers).
    """
    if box is None or math.isinf(box):
        return w
    if box <= 0:
        raise InputError(f"projection box must be > 0, got {box}")
    return w.clamp(-box, box)


def reference_gd(
    spec: NetSpec,
    loss: Loss | str,
    w0: Tensor,
    x: Tensor,
    y: Tensor,
    *,
    lr: float,
    steps: int,
    box: float | None = None,
) -> Tensor:
    """Run ``w_l = Proj_W(w_{l-1} - lr * ∇L_n(w_{l-1}))`` for ``steps`` steps (eq. 2.3 with ε = 0).

    Returns the trajectory ``(steps + 1, *tasks, P)`` with ``w_0 = w0`` first. Gradients come from
    [`lemma1_terms`][icdl.nets.lemma1_terms]; tests check them against autograd.
    """
    if steps < 0:
        raise InputError(f"steps must be >= 0, got {steps}")
    traj = [w0]
    w = w0
    for _ in range(steps):
        w = projected_step(w, gradient(spec, loss, w, x, y), lr, box)
        traj.append(w)
    return torch.stack(traj)
