"""The construction's engine: the sublayer kinds and their coefficient tables
([`sublayers`][icdl.construct.engine.sublayers], [`layers`][icdl.construct.engine.layers],
[`row_layers`][icdl.construct.engine.row_layers]), the in-place kernels they run with
([`kernels`][icdl.construct.engine.kernels]), the token layout ([`layout`][icdl.construct.engine.layout]),
the conditioned ReLU sums ([`terms`][icdl.construct.engine.terms]), products as sums of ReLUs
([`products`][icdl.construct.engine.products]) and a variant's closed-form sizes
([`sizes`][icdl.construct.engine.sizes]). Nothing here knows a variant, the compiler or the verifier."""
