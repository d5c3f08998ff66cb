"""A-priori bounds, computed from a configuration before anything is run: the error budget of one GD step
([`budget`][icdl.construct.bounds.budget]), the ranges the fitted sums see along the GD trajectory
([`ranges`][icdl.construct.bounds.ranges], ``radius="auto"``) and the prediction error a weight error allows
([`prediction`][icdl.construct.bounds.prediction]). Below the contract, which states PASS against them,
and the compiler, which fits ``radius="auto"`` with them."""
