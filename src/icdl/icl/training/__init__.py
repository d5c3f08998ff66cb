"""Training the ICL transformer: the loop ([`train`][icdl.icl.training.train]), checkpoints
([`checkpoint`][icdl.icl.training.checkpoint]), the evaluation interval
([`interval`][icdl.icl.training.interval]), the fast path ([`fast`][icdl.icl.training.fast]), multi-process
launch ([`launch`][icdl.icl.training.launch]) and the training cost ([`cost`][icdl.icl.training.cost])."""
