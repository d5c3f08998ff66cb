"""Evaluating a trained run against the baselines: suites and options
([`evaluate`][icdl.icl.evaluation.evaluate]), running the baselines and the paired comparisons
([`baseline_runs`][icdl.icl.evaluation.baseline_runs]), the result cache
([`cache`][icdl.icl.evaluation.cache]), learning curves ([`curves`][icdl.icl.evaluation.curves]), the
report ([`report`][icdl.icl.evaluation.report]) and its figures ([`plots`][icdl.icl.evaluation.plots])."""
