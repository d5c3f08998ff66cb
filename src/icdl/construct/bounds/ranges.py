"""A-priori ranges of everything the fitted ReLU sums and products see along the GD trajectory
(``--range auto``, ``radius="auto"``).

A compiled GD transformer approximates r, r' (Lemmas 2-3), the loss derivative u (Lemma 4) and, in the
``softmax`` and ``rows`` variants, products of two slots by sums of ReLUs fitted on a range: ``[-R, R]``
(the configuration's ``radius``) and, for the softmax variant's weight factors, ``|w| <= B`` (the box) or a
weight range. Outside its range a fitted sum is flat (or a product's error grows like the squared excess),
so the construction is only as good as the ranges.
[`trajectory_bounds`][icdl.construct.bounds.ranges.trajectory_bounds] bounds, before anything is compiled,
every such argument at every GD step ``l = 0..L`` and every token (the query included) by **interval
arithmetic on the actual prompt**:

* weights: ``w^(0)`` exactly; ``w^(l+1) in Proj_W(w^(l) - eta g^(l))`` with ``g^(l)`` the interval of the
  gradient at the weight interval of step l (eq. (2.3)); the box clips the interval (Proj_W is monotone per
  coordinate), so with a box every step after the first has ``|w_c| <= B``; without one the interval grows
  by ``eta |g|`` per step (and may blow up: then no range can be given);
* forward (eq. (3.3)): ``z(j) = V_j p(j-1)`` by midpoint-radius interval products, ``p(j) = r(z(j))`` and
  ``r'(z(j))`` through the monotone r and the unimodal r';
* loss (Definition 3): ``u(p(N), y)`` is non-decreasing in ``p(N)`` for every convex loss here, so its
  interval is ``[u(t_lo, y), u(t_hi, y)]`` on the examples and exactly 0 on the query (Lemma 4's gate);
* backward (eq. (3.6)): ``back(N) = u``, ``s(j) = r'(j-1) ⊙ back(j)``, ``back(j) = V_{j+1}^T s(j+1)``; the
  gradient ``(1/(2n)) sum_i s_i(j) p_i(j-1)^T`` (eq. (3.7)).

Every approximation is allowed its error (``1.01 eps`` per fitted sum, ``eps`` per approximate product,
summed over a product's fan-in), so the bound holds for the *construction's* trajectory, not only exact
GD's: by induction over the order of computation, each argument lies in its range because every earlier one
did (the ranges are set from these bounds), so each approximation is within its eps, so the next argument is
within its bound. Where the construction is exact (ReLU networks, the squared loss, no products) the bound is
the exact trajectory's, computed by the same pass. The result is rounded up (3 significant digits, after a
1e-6 relative margin for the rounding of the bound itself).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.nets import NetSpec, get_loss

if TYPE_CHECKING:
    # Type-only: a configuration as read here (GDConfig, above, calls resolve_auto_range).
    from icdl.construct.protocols import StepConfig

__all__ = [
    "AUTO_RANGE_FLOOR",
    "DEFAULT_NEEDS",
    "PRODUCTS",
    "QUANTITIES",
    "AutoRanges",
    "RangeBounds",
    "RangeNeeds",
    "auto_ranges",
    "explain_auto_range",
    "naming_auto_range",
    "resolve_auto_range",
    "trajectory_bounds",
]

C = TypeVar("C", bound="StepConfig")  # the configuration type resolve_auto_range returns as it got

#: The quantities bounded along the trajectory (keys of
#: [`RangeBounds.maxima`][icdl.construct.bounds.ranges.RangeBounds]): ``x`` inputs (all tokens), ``z``
#: pre-activations of every layer, ``p`` the inputs ``p(0..N-1)`` of the forward products, ``t`` the
#: network output ``p(N)``, ``y`` labels, ``u`` loss derivative, ``s`` deltas, ``back`` the vectors
#: multiplied into r' (``u`` and ``V_{j+1}^T s(j+1)``), ``w`` weights, ``r_prime`` r'.
QUANTITIES = ("x", "z", "p", "t", "y", "u", "s", "back", "w", "r_prime")

#: Kinds of approximate product a variant may use (each within eps while its factors are in range):
#: ``forward`` ``v * p``, ``transpose`` ``v * s``, ``gradient`` ``p * s``, ``derivative`` ``r' * back`` (the
#: last only on layers with a fitted r'; a 0/1 relu' mask product is exact).
PRODUCTS = ("forward", "transpose", "gradient", "derivative")


@dataclass(frozen=True)
class RangeNeeds:
    """What a construction variant fits on ranges (``Variant.range_needs``).

    Attributes:
        quantities: the ``QUANTITIES`` that must lie in ``[-R, R]``
            (a fitted loss derivative adds ``t`` and ``y`` by itself).
        weights: whether the products' weight factors get their own range (``GDConfig.weight_range``).
        products: the kinds of approximate product it uses (``PRODUCTS``);
            each adds its error eps to the bounds.
    """

    quantities: tuple[str, ...] = ("z",)
    weights: bool = False
    products: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [q for q in self.quantities if q not in QUANTITIES] + [
            p for p in self.products if p not in PRODUCTS
        ]
        if bad:
            raise ValueError(f"unknown range quantities or products: {bad}")


#: What the paper's construction fits on ranges: r and r' of every layer at the pre-activations.
DEFAULT_NEEDS = RangeNeeds()

#: Smallest automatic range: a sum fitted on a tiny range is no cheaper and can have no terms at all.
AUTO_RANGE_FLOOR = 1.0

_EXACT_ACTIVATIONS = ("relu", "identity")  # exact ReLU sums (icdl.relu_sums.relu_sum_for)
_EXACT_LOSSES = ("squared", "huber")  # exact two-argument sums (icdl.relu_sums.loss_derivative_sum)
_MARGIN = 1e-6  # relative, for the rounding of the interval arithmetic itself
#: With a box, a bound above this multiple of the exact GD trajectory's own maximum is capped there: the
#: interval bound over box-wide weight intervals grows like (K B)^N through the layers and can exceed C
#: while the prompt needs |z| of a few units; the verdict's (b) checks that the construction stays in range.
BOX_CAP_FACTOR = 2.0
# A fitted sum's true sup error: its measured one (<= eps) plus what the grid leaves unmeasured (<= eps/400,
# icdl.relu_sums), rounded up.
_FIT_SLACK = 1.01


class _Iv:
    """A tensor of intervals ``[lo, hi]`` (elementwise)."""

    __slots__ = ("hi", "lo")

    def __init__(self, lo: Tensor, hi: Tensor) -> None:
        self.lo, self.hi = lo, hi

    @classmethod
    def point(cls, v: Tensor) -> _Iv:
        return cls(v, v)

    def mag(self) -> float:
        """``max |v|`` over the interval (0 for an empty tensor); NaN propagates."""
        if self.lo.numel() == 0:
            return 0.0
        return float(torch.maximum(self.lo.abs(), self.hi.abs()).max())

    def widen(self, e: float) -> _Iv:
        return self if e == 0.0 else _Iv(self.lo - e, self.hi + e)

    def times(self, other: _Iv) -> _Iv:
        """Elementwise product (the four corner products)."""
        c = torch.stack([self.lo * other.lo, self.lo * other.hi, self.hi * other.lo, self.hi * other.hi])
        return _Iv(c.min(0).values, c.max(0).values)

    def t(self) -> _Iv:
        return _Iv(self.lo.transpose(-1, -2), self.hi.transpose(-1, -2))


def _matmul(a: _Iv, b: _Iv) -> _Iv:
    """``a @ b`` for interval matrices in midpoint-radius form (Rump): centre ``ac bc``, radius
    ``|ac| br + ar |bc| + ar br``; it contains every product of members."""
    ac, ar = (a.lo + a.hi) / 2, (a.hi - a.lo) / 2
    bc, br = (b.lo + b.hi) / 2, (b.hi - b.lo) / 2
    c = ac @ bc
    a_point, b_point = not bool(ar.any()), not bool(br.any())
    if a_point and b_point:  # exact arguments (a ReLU network without approximations): one product
        return _Iv(c, c)
    r = (0 if b_point else ac.abs() @ br) + (0 if a_point else ar @ bc.abs() + ar @ br)
    return _Iv(c - r, c + r)


def _activation(name: str, z: _Iv, slack: float, delta: float) -> tuple[_Iv, _Iv]:
    """``r(z)`` and ``r'(z)`` over the interval ``z`` (r monotone; r' unimodal, peak at 0 for sigmoid and
    tanh, monotone for softplus and relu), widened by the fitted sums' error ``slack`` where fitted."""
    lo, hi = z.lo, z.hi
    if name == "relu":
        # r' is the relu' step clamp(z / delta, 0, 1) (icdl.construct.engine.terms): monotone in z.
        step = (lambda t: (t / delta).clamp(0, 1)) if delta > 0 else (lambda t: (t > 0).to(t.dtype))
        return _Iv(lo.clamp(min=0), hi.clamp(min=0)), _Iv(step(lo), step(hi))
    if name == "identity":
        return _Iv(lo, hi), _Iv(torch.ones_like(lo), torch.ones_like(hi))
    if name == "softplus":
        sp = lambda t: torch.logaddexp(t, torch.zeros_like(t))  # noqa: E731
        p, rp = _Iv(sp(lo), sp(hi)), _Iv(torch.sigmoid(lo), torch.sigmoid(hi))
    elif name in ("sigmoid", "tanh"):
        fn = torch.sigmoid if name == "sigmoid" else torch.tanh
        d = (
            (lambda t: torch.sigmoid(t) * (1 - torch.sigmoid(t)))
            if name == "sigmoid"
            else (lambda t: 1 - torch.tanh(t) ** 2)
        )
        # r' is even and decreasing in |z|: its max on [lo, hi] is at the point nearest 0.
        near = torch.where((lo <= 0) & (hi >= 0), torch.zeros_like(lo), torch.minimum(lo.abs(), hi.abs()))
        far = torch.maximum(lo.abs(), hi.abs())
        p, rp = _Iv(fn(lo), fn(hi)), _Iv(d(far), d(near))
    else:
        raise InputError(f"--range auto has no interval rule for activation {name!r}")
    return p.widen(slack), rp.widen(slack)


def _loss_derivative(loss: str, t: _Iv, y: Tensor, slack: float) -> _Iv:
    """``u(t, y)`` over ``t in [t_lo, t_hi]``: every loss here is convex in t, so u is non-decreasing in t."""
    fn = get_loss(loss).deriv
    return _Iv(fn(t.lo, y), fn(t.hi, y)).widen(slack)


@dataclass(frozen=True)
class RangeBounds:
    """A-priori bounds along the whole trajectory (steps ``0..L``, every token, every layer).

    Attributes:
        maxima: for each of ``QUANTITIES``, a bound on its largest
            ``|value|``.
        weights: a bound on ``max_c |w_c^(l)|`` for each step ``l = 0..L``.
    """

    maxima: dict[str, float]
    weights: tuple[float, ...] = field(default=())

    def bound(self, quantities: Sequence[str]) -> float:
        """The largest bound among ``quantities``
        (``QUANTITIES``)."""
        return max((self.maxima[q] for q in quantities), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"maxima": dict(self.maxima), "weights": list(self.weights)}


def _prompt(x: Tensor, y: Tensor, x_query: Tensor, w0: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The prompt as float64 ``x (n, d_x)``, ``y (n, d_y)``, ``x_query (d_x,)``, ``w0 (P,)`` (a leading
    batch of one is dropped)."""
    out = []
    for v, dim in ((x, 2), (y, 2), (x_query, 1), (w0, 1)):
        v = v.detach().to(torch.float64)
        if v.dim() == dim + 1 and v.shape[0] == 1:
            v = v[0]
        if v.dim() != dim:
            raise InputError(
                f"--range auto bounds one prompt at a time; got a tensor of shape {tuple(v.shape)}"
            )
        out.append(v)
    return out[0], out[1], out[2], out[3]


@dataclass
class _Step:
    """What one step's interval pass found: maxima per quantity and the gradient interval."""

    maxima: dict[str, float]
    grad: _Iv | None


@dataclass(frozen=True)
class _Errors:
    """The errors the bounds allow: ``fit`` per fitted one- or two-argument sum, ``products[kind]`` per
    approximate product of that kind (0: exact), and the relu' window ``delta``."""

    fit: float
    products: dict[str, float]
    delta: float

    def product(self, kind: str) -> float:
        return self.products.get(kind, 0.0)


def _forward(
    spec: NetSpec, Vs: list[_Iv], x_all: Tensor, err: _Errors
) -> tuple[list[_Iv], list[_Iv], list[_Iv]]:
    """Forward intervals on all tokens: ``z(j)``, ``p(j)`` (``p[0] = x``), ``r'(j)``."""
    ps: list[_Iv] = [_Iv.point(x_all)]
    zs: list[_Iv] = []
    rps: list[_Iv] = []
    for j, V in enumerate(Vs, start=1):
        z = _matmul(ps[-1], V.t()).widen(spec.widths[j - 1] * err.product("forward"))
        name = spec.layer_act(j).name
        p, rp = _activation(name, z, 0.0 if name in _EXACT_ACTIVATIONS else err.fit, err.delta)
        zs.append(z)
        ps.append(p)
        rps.append(rp)
    return zs, ps, rps


def _backward(
    spec: NetSpec, loss: str, Vs: list[_Iv], ps: list[_Iv], rps: list[_Iv], y: Tensor, err: _Errors
) -> tuple[_Iv, list[_Iv], list[_Iv], _Iv]:
    """``u``, ``s(j)``, ``back(j)`` on the n examples and the gradient interval (eq. (3.6), (3.7)). The
    query's u is gated to exactly 0 (Lemma 4), and so is every product with it as second factor, so its s
    and back are exactly 0 and it adds nothing to the gradient."""
    n, N = y.shape[0], spec.depth

    def ex(v: _Iv) -> _Iv:
        return _Iv(v.lo[:n], v.hi[:n])

    u = _loss_derivative(loss, ex(ps[-1]), y, 0.0 if loss in _EXACT_LOSSES else err.fit)

    def deriv(j: int) -> float:
        return 0.0 if spec.layer_act(j).name in _EXACT_ACTIVATIONS else err.product("derivative")

    back: list[_Iv] = [u] * N
    s: list[_Iv] = [u] * N
    s[N - 1] = ex(rps[N - 1]).times(u).widen(deriv(N))
    for j in range(N - 1, 0, -1):
        back[j - 1] = _matmul(s[j], Vs[j]).widen(spec.widths[j + 1] * err.product("transpose"))
        s[j - 1] = ex(rps[j - 1]).times(back[j - 1]).widen(deriv(j))
    grads = [_matmul(s[j].t(), ex(ps[j])) for j in range(N)]
    lo = torch.cat([a.lo.flatten() for a in grads]) / (2 * n)
    hi = torch.cat([a.hi.flatten() for a in grads]) / (2 * n)
    # (1/(2n)) sum over the n examples of products within eps each: within eps / 2.
    return u, s, back, _Iv(lo, hi).widen(err.product("gradient") / 2)


def _step(spec: NetSpec, loss: str, W: _Iv, x_all: Tensor, y: Tensor, err: _Errors, backward: bool) -> _Step:
    """Interval pass of one GD step at weights ``W`` (only the forward for the last step: the readout's)."""
    D = spec.offsets
    Vs = [
        _Iv(W.lo[D[j] : D[j + 1]].reshape(spec.shapes[j]), W.hi[D[j] : D[j + 1]].reshape(spec.shapes[j]))
        for j in range(spec.depth)
    ]
    zs, ps, rps = _forward(spec, Vs, x_all, err)
    m = {
        "w": W.mag(),
        "z": max(z.mag() for z in zs),
        "p": max(p.mag() for p in ps[:-1]),
        "t": ps[-1].mag(),
        "r_prime": max(r.mag() for r in rps),
    }
    if not backward:
        return _Step(m, None)
    u, s, back, grad = _backward(spec, loss, Vs, ps, rps, y, err)
    m.update(u=u.mag(), s=max(v.mag() for v in s), back=max(v.mag() for v in back))
    return _Step(m, grad)


def trajectory_bounds(
    spec: NetSpec,
    loss: str,
    *,
    lr: float,
    steps: int,
    box: float | None,
    x: Tensor,
    y: Tensor,
    x_query: Tensor,
    w0: Tensor,
    eps: float = 0.0,
    products: Sequence[str] = (),
    delta: float = 0.0,
) -> RangeBounds:
    """Bounds on every quantity of ``QUANTITIES`` along ``steps``
    projected-GD steps (eq. (2.3)) from ``w0`` on the prompt, for the construction's trajectory: each
    fitted sum within ``(1 + 1%) eps`` (the margin [`icdl.relu_sums`][icdl.relu_sums] leaves unmeasured),
    each approximate product of a kind in ``products`` within ``eps``, the relu' step ``clamp(z/delta, 0,
    1)``. ``eps = 0``: exact GD. See the module docstring.

    A bound that overflows is ``inf`` from that step on (the caller decides what that means)."""
    x, y, x_query, w0 = _prompt(x, y, x_query, w0)
    err = _Errors(_FIT_SLACK * eps, dict.fromkeys(products, eps), delta)
    x_all = torch.cat([x, x_query[None]])
    W = _Iv.point(w0)
    maxima = dict.fromkeys(QUANTITIES, 0.0)
    maxima["x"] = float(x_all.abs().max())
    maxima["y"] = float(y.abs().max()) if y.numel() else 0.0
    weights = []
    with torch.no_grad():
        for l in range(steps + 1):
            st = _step(spec, loss, W, x_all, y, err, backward=l < steps)
            weights.append(st.maxima["w"])
            if not all(math.isfinite(v) for v in st.maxima.values()):
                maxima = {k: (math.inf if k not in ("x", "y") else v) for k, v in maxima.items()}
                weights += [math.inf] * (steps - l)
                break
            for k, v in st.maxima.items():
                maxima[k] = max(maxima[k], v)
            if st.grad is not None:
                lo, hi = W.lo - lr * st.grad.hi, W.hi - lr * st.grad.lo
                if box is not None:
                    lo, hi = lo.clamp(-box, box), hi.clamp(-box, box)
                W = _Iv(lo, hi)
    return RangeBounds(maxima, tuple(weights))


def _round_up(v: float) -> float:
    """``v`` rounded up to 3 significant digits."""
    if v <= 0 or not math.isfinite(v):
        return v
    e = math.floor(math.log10(v)) - 2
    k = math.ceil(v / 10.0**e)
    # v / 10**e and k * 10**e both round: the first candidate can land one step below v (13.000000000000002
    # -> 13.0), which would make an a-priori range smaller than its bound; go up a step until it is not
    while True:
        up = k * 10.0**e
        clean = round(up, -e) if e < 0 else up  # 13.1, not 13.100000000000001
        if clean >= v:
            return clean
        if up >= v:
            return up
        k += 1


@dataclass(frozen=True)
class AutoRanges:
    """The ranges ``--range auto`` resolved to.

    Attributes:
        radius: ``R``: every fitted sum's and product's non-weight factor lies in ``[-R, R]``.
        weight_range: the weight factors' range of the products (None: the variant does not need one, or the
            box B covers the whole trajectory).
        bounds: the [`RangeBounds`][icdl.construct.bounds.ranges.RangeBounds] they came from (capped ones
        replaced). capped: the quantities whose interval bound (with a box) was above ``BOX_CAP_FACTOR`` times
            the exact GD trajectory's maximum and was capped there: for those, being in range is not by
            construction but checked by the verdict's (b).
    """

    radius: float
    weight_range: float | None
    bounds: RangeBounds
    capped: tuple[str, ...] = ()


def auto_ranges(
    spec: NetSpec,
    loss: str,
    *,
    lr: float,
    steps: int,
    box: float | None,
    x: Tensor,
    y: Tensor,
    x_query: Tensor,
    w0: Tensor,
    eps: float,
    needs: RangeNeeds = DEFAULT_NEEDS,
    delta: float = 0.0,
    limit: float = 1e6,
) -> AutoRanges:
    """``R`` (and, when ``needs.weights``, the products' weight range) from
    [`trajectory_bounds`][icdl.construct.bounds.ranges.trajectory_bounds]: the largest bound among
    ``needs.quantities`` (the variant's), plus ``t`` and ``y`` for a fitted loss derivative (its two-argument
    sum is fitted on ``[-R, R]^2``), rounded up to 3 significant digits and at least
    ``AUTO_RANGE_FLOOR``.

    Raises [`InputError`][icdl.errors.InputError] (one line) when a needed bound, or one of ``|p(N)|``,
    ``|u|``, ``|back|`` (which the gate constant C must exceed), is not finite or above ``limit`` (pass C):
    no range can be given for this prompt."""
    b = trajectory_bounds(
        spec,
        loss,
        lr=lr,
        steps=steps,
        box=box,
        x=x,
        y=y,
        x_query=x_query,
        w0=w0,
        eps=eps,
        products=needs.products,
        delta=delta,
    )
    need = list(needs.quantities) + ([] if loss in _EXACT_LOSSES else ["t", "y"])
    check = [*need, "t", "u", "back"] + (["w"] if needs.weights else [])
    capped: tuple[str, ...] = ()
    if box is not None:
        # the exact GD trajectory (no approximation: the intervals stay points) caps every bound at
        # BOX_CAP_FACTOR times its own maximum (module docstring, "with a box")
        exact = trajectory_bounds(
            spec, loss, lr=lr, steps=steps, box=box, x=x, y=y, x_query=x_query, w0=w0, delta=delta
        )
        cap = {q: BOX_CAP_FACTOR * v for q, v in exact.maxima.items()}
        capped = tuple(q for q in check if not b.maxima[q] <= cap[q] and math.isfinite(cap[q]))
        if capped:
            maxima = {q: (cap[q] if q in capped else v) for q, v in b.maxima.items()}
            b = RangeBounds(maxima, b.weights)
    worst = max(b.maxima[q] for q in check)
    if not worst <= limit:  # also NaN
        grown = next((l for l, v in enumerate(b.weights) if not v <= limit), None)
        where = "" if grown is None else f" (|w| from step {grown})"
        if box is None:
            advice = "use --projection box --box B, fewer --steps, a smaller --lr, or an explicit --range R"
        else:
            # the box bounds |w|, but the interval bound on z(j) = V_j p(j-1) over a box-wide weight
            # interval can still grow like (K B)^N through the layers: only a smaller box, fewer steps (the
            # interval reaches the box's width later) or a smaller lr help, or a fixed R checked afterwards
            where += f" (the weights stay in the box |w_c| <= {box:g}, but the layers' intervals grow)"
            advice = (
                "use a smaller --box, fewer --steps, a smaller --lr, or an explicit --range R "
                "(out-of-range arguments are then counted by the verdict)"
            )
        raise InputError(
            f"--range auto: no range fits this prompt: the a-priori bound over {steps} GD steps reaches "
            f"{worst:.3g}{where}, above {limit:g}; {advice}"
        )
    radius = max(AUTO_RANGE_FLOOR, _round_up(b.bound(need) * (1 + _MARGIN)))
    weight_range = None
    if needs.weights:
        wb = b.maxima["w"]
        if box is None or wb > box:
            weight_range = max(AUTO_RANGE_FLOOR, _round_up(wb * (1 + _MARGIN)))
    return AutoRanges(radius, weight_range, b, capped)


def explain_auto_range(error: InputError, config: StepConfig) -> InputError:
    """``error`` (a fitter's refusal, e.g. ``eps too small for softplus on [-62700, 62700]``) with what set
    its range when ``config`` came from ``--range auto``: the user never typed that R. Unchanged otherwise."""
    if not config.auto_range or "--range auto" in str(error):
        return error
    wr = f", weights {config.weight_range:g}" if config.weight_range is not None else ""
    return InputError(
        f"{error} [R = {config.radius:g}{wr} was set by --range auto: the a-priori bound on this prompt's "
        "trajectory; use a larger --eps, an explicit --range R, fewer --steps or a smaller --lr]"
    )


@contextmanager
def naming_auto_range(config: StepConfig) -> Iterator[None]:
    """Re-raise an [`InputError`][icdl.errors.InputError] from the block as
    [`explain_auto_range`][icdl.construct.bounds.ranges.explain_auto_range] words it (a fitter's refusal)."""
    try:
        yield
    except InputError as e:
        raise explain_auto_range(e, config) from None


def resolve_auto_range(config: C, prompt: tuple[Tensor, Tensor, Tensor, Tensor], needs: RangeNeeds) -> C:
    """``config`` with ``radius`` (and ``weight_range``) set by
    [`auto_ranges`][icdl.construct.bounds.ranges.auto_ranges] on ``prompt = (x, y, x_query, w0)`` for a
    variant that needs ``needs`` (``Variant.range_needs``), over all ``config.steps`` GD steps, and
    ``auto_range=True``. The gate constant C is the limit."""
    x, y, x_query, w0 = prompt
    c = config
    auto = auto_ranges(
        c.spec,
        c.loss,
        lr=c.lr,
        steps=c.steps,
        box=c.box,
        x=x,
        y=y,
        x_query=x_query,
        w0=w0,
        eps=c.eps,
        needs=needs,
        delta=c.delta or 0.0,
        limit=c.gate,
    )
    return replace(c, radius=auto.radius, weight_range=auto.weight_range, auto_range=True)
