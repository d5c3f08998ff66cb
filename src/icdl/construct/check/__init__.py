"""The verifier: [`verify`][icdl.construct.check.verify] traces a compiled model against reference GD with
the streaming sublayer check ([`stream`][icdl.construct.check.stream]; after in-place sublayers,
[`written`][icdl.construct.check.written]) and returns a [`report`][icdl.construct.check.report]."""
