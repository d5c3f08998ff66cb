"""The sublayer contract: a variant defined HERE (not in the package) is compiled, run from the CLI's
registry and verified without any change to the verifier; a wrong expected effect is caught; sublayers
describe themselves from their own tables; the verifier has no role- or variant-specific code."""

from __future__ import annotations

import ast
import importlib
import inspect
import math

import pytest
import torch

from icdl.construct import (
    Expect,
    Variant,
    compile_gd_transformer,
    register,
    sample_task,
    verify,
)
from icdl.construct.build import blocks
from icdl.construct.build.blocks import BuildContext
from icdl.construct.engine.layers import HeadTable, ReLUAttention, Role, Sublayer
from icdl.construct.engine.layout import Layout
from icdl.construct.variants import paper
from icdl.construct.variants.registry import VARIANTS, unregister
from icdl.nets import NetSpec, reference_gd
from icdl.sublayer import SublayerInfo


def _split_derivative(ctx: BuildContext, j: int) -> ReLUAttention:
    """The paper's r' layer restricted to layer j (one sublayer per layer instead of one for all)."""
    heads = HeadTable()
    blocks.add_unit_sum_heads(heads, ctx, j, ctx.r_prime[j - 1], "R")
    return ctx.attention(heads, Role("toy_rprime", "Lemma 3 (split)", j), exact_sums=ctx.exact_step)


def _toy_block(ctx: BuildContext) -> list[Sublayer]:
    N = ctx.spec.depth
    out: list[Sublayer] = [blocks.forward_layer(ctx, j) for j in range(1, N + 1)]
    out += [_split_derivative(ctx, j) for j in range(1, N + 1)]
    out.append(blocks.loss_layer(ctx))
    out += [blocks.backward_layer(ctx, j) for j in range(N, 0, -1)]
    out += [blocks.update_layer(ctx), blocks.project_layer(ctx)]
    return out


def _toy_effects(info: SublayerInfo, layout: Layout) -> list[Expect]:
    if info.role == "toy_rprime":
        j = info.layer
        assert j is not None
        # a quantity only this variant names, as a function of the reference
        return [Expect(f"R_{j}", lambda ref: ref.sur.r_prime[j - 1])]
    return blocks.effects(info, layout)


def _wrong_effects(info: SublayerInfo, layout: Layout) -> list[Expect]:
    if info.role == "toy_rprime" and info.layer == 2:
        return [Expect("R_2", "r_prime", 1)]  # claims r'(1) where the sublayer writes r'(2)
    return _toy_effects(info, layout)


@pytest.fixture
def toy():
    names = []

    def add(name: str, effects) -> str:
        register(
            Variant(name, "test-only", paper.layout, _toy_block, paper.build_readout, effects), replace=True
        )
        names.append(name)
        return name

    yield add
    for n in names:
        unregister(n)


def test_a_variant_defined_in_a_test_is_verified(toy) -> None:
    name = toy("toy-split", _toy_effects)
    spec = NetSpec(3, 4, 3, 2)
    x, y, xq, w0, _ = sample_task(spec, 7, seed=0)
    model = compile_gd_transformer(spec, steps=3, n=7, projection="box", box=0.6, variant=name)
    assert model.sublayers_per_step == 3 * 3 + 3  # N forward, N split r', loss, N backward, update, project
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.passed and rep.max_abs_err_weights <= 1e-12
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=3, box=0.6)
    torch.testing.assert_close(model.read_weights(model(model.build_prompt(x, y, xq, w0)))[0], ref[-1])


def test_a_wrong_expected_effect_is_reported_at_its_sublayer(toy) -> None:
    name = toy("toy-wrong", _wrong_effects)
    spec = NetSpec(3, 4, 3, 2)
    x, y, xq, w0, _ = sample_task(spec, 7, seed=0)
    model = compile_gd_transformer(spec, steps=1, n=7, variant=name)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    div = rep.first_divergence
    assert div is not None and (div.step, div.name, div.slot) == (0, "toy_rprime_2", "R_2")


def test_cli_choices_come_from_the_registry(toy) -> None:
    from click.testing import CliRunner

    from icdl.cli.construct import construct

    name = toy("toy-cli", _toy_effects)
    r = CliRunner().invoke(
        construct, ["--variant", name, "-N", "2", "-K", "2", "-L", "1", "-n", "3", "--json"]
    )
    assert r.exit_code == 0, r.output
    assert '"variant": "toy-cli"' in r.output and '"passed": true' in r.output


def test_sublayers_describe_themselves_from_their_tables() -> None:
    spec = NetSpec(3, 4, 3, 2)
    model = compile_gd_transformer(spec, steps=1, n=5, projection="box", box=1.0)
    by_name = {i.name: i for i in model.infos()}
    assert by_name["forward_2"].reads == ("W[V_2]", "P_1", "ONE") and by_name["forward_2"].writes == ("P_2",)
    assert by_name["backward_1"].reads == ("W[V_2]", "R_1", "S_2") and by_name["backward_1"].writes == (
        "S_1",
    )
    assert by_name["loss"].reads == ("Y", "P_3", "ONE", "T") and by_name["loss"].writes == ("G",)
    assert by_name["update"].writes == ("W[V_1]", "W[V_2]", "W[V_3]")
    # derived, not stored: changing a table changes the description
    m = model.block_layers[0]
    before = m.info
    m.q_coef.zero_()
    assert (
        type(m)(
            {n: getattr(m, n) for n in m.TABLES}, m.dim, role=m.role, labels=model.layout.slot_labels()
        ).info.reads
        != before.reads
    )


def test_the_verifier_has_no_role_or_variant_specific_code() -> None:
    """No string constant in icdl.construct.check.verify names a role or a variant."""
    # the module (the package exports the function of that name)
    module = importlib.import_module("icdl.construct.check.verify")
    assert inspect.ismodule(module) and "def compare(" in inspect.getsource(module)
    tree = ast.parse(inspect.getsource(module))
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    roles = {"forward", "derivative", "loss", "backward", "update", "project", "forward_derivative"}
    assert not strings & (roles | set(VARIANTS))


def test_per_step_errors_are_measured_only_where_a_slot_names_them(toy) -> None:
    spec = NetSpec(3, 4, 3, 2)
    x, y, xq, w0, _ = sample_task(spec, 7, seed=0)
    rep = verify(compile_gd_transformer(spec, steps=2, n=7), x, y, xq, w0, lipschitz_iters=0)
    for e in rep.steps:  # paper variant: every quantity has a slot, and ReLU GD is exact
        assert all(0.0 <= v <= 1e-12 for v in (e.p, e.r_prime, e.u, e.s))
    name = toy("toy-callable", _toy_effects)  # its R slots are checked through a callable only
    rep = verify(compile_gd_transformer(spec, steps=2, n=7, variant=name), x, y, xq, w0, lipschitz_iters=0)
    assert rep.passed and all(math.isnan(e.r_prime) and e.p <= 1e-12 for e in rep.steps)
    assert "—" in rep.table().splitlines()[1]


@pytest.mark.parametrize("tokens", ["last", "examples", "", "ALL", None])
def test_expect_refuses_an_unknown_token_selection(tokens) -> None:
    """Expect documents four selections; anything else is refused when the Expect is made (the verifier
    would otherwise fail later with a KeyError far from the variant that wrote it)."""
    with pytest.raises(ValueError, match="tokens must be"):
        Expect("W", "w", tokens=tokens)
    for ok in ("all", "query", "data", "prefix"):
        assert Expect("W", "w", tokens=ok).tokens == ok


def test_expect_refuses_an_unknown_quantity() -> None:
    with pytest.raises(ValueError, match="unknown reference quantity"):
        Expect("W", "weights")
