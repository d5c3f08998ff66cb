"""The old module paths (before issue 32's subpackages) still import, as the new modules themselves, with a
DeprecationWarning naming the new path (icdl.aliases); saved models name no module."""

from __future__ import annotations

import importlib
import json
import sys
import warnings

import pytest

from icdl.aliases import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_with_a_warning(old: str) -> None:
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=MOVED[old].replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is new
    assert (
        module.__name__ == MOVED[old] and module.__spec__ is not None and module.__spec__.name == MOVED[old]
    )
    parent, _, child = old.rpartition(".")
    kept = getattr(sys.modules[parent], child)  # the package's own name where it has one (construct.verify)
    assert kept is new or not isinstance(kept, type(sys))


def test_every_old_path_names_a_module_that_exists_and_no_new_path_is_old() -> None:
    assert len(MOVED) > 40
    for new in MOVED.values():
        assert importlib.util.find_spec(new) is not None, new
        assert new not in MOVED


def test_the_documented_old_imports_work() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from icdl.construct.tables import HeadTable
        from icdl.construct.verify import verify
        from icdl.icl.evaluate import EvalOptions, evaluate_run
        from icdl.icl.train import load_run, train

        from icdl.construct.compile import GDConfig, SumTerms, compile_gd_transformer
        from icdl.construct.variants import VARIANTS, get_variant, register
        from icdl.icl.baselines import LeastSquaresBaseline, check_prompts
    import icdl

    assert icdl.compile_gd_transformer is compile_gd_transformer and icdl.evaluate_run is evaluate_run
    assert icdl.verify is verify and icdl.train is train and icdl.load_run is load_run
    assert get_variant("paper") is VARIANTS["paper"] and callable(register)
    assert (
        GDConfig.__module__ == "icdl.construct.config"
        and SumTerms.__module__ == "icdl.construct.engine.terms"
    )
    assert HeadTable.__module__ == "icdl.construct.engine.sublayers"
    assert LeastSquaresBaseline.__module__ == "icdl.icl.baselines.simple" and callable(check_prompts)
    assert EvalOptions.__module__ == "icdl.icl.evaluation.options"


def test_an_unmoved_path_is_not_answered() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("icdl.construct.no_such_module")


def test_a_saved_model_names_classes_not_modules(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from icdl.construct import compile_gd_transformer, load, save
    from icdl.nets import NetSpec

    model = compile_gd_transformer(
        NetSpec(depth=2, width=2, in_dim=2, out_dim=1), steps=1, n=3, variant="rows"
    )
    save(model, tmp_path / "m")
    text = (tmp_path / "m" / "model.json").read_text()
    assert "icdl.construct" not in text and "icdl.icl" not in text  # nothing a module move could break
    assert {m["class"] for m in json.loads(text)["block"]} <= {
        "RowAttention",
        "RowMLP",
        "ReLUAttention",
        "EWML",
    }
    assert type(load(tmp_path / "m").block_layers[0]).__name__ == json.loads(text)["block"][0]["class"]
