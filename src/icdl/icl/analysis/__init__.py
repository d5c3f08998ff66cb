"""Analyses of a trained model: its alignment with compiled GD ([`align`][icdl.icl.analysis.align], figures
in [`align_plots`][icdl.icl.analysis.align_plots]) and its sensitivities
([`sensitivity`][icdl.icl.analysis.sensitivity])."""
