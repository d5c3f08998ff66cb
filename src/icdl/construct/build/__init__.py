"""What every variant builds with: the contract ([`contract`][icdl.construct.build.contract]: ``Expect``,
``Reference``, ``Variant``), the inputs of every builder ([`context`][icdl.construct.build.context]:
``BuildContext``), the GD-step prompt ([`prompt`][icdl.construct.build.prompt]) and one builder per role of
the paper's block ([`blocks`][icdl.construct.build.blocks])."""
