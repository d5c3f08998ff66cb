"""Old module paths of the package, kept importable with a ``DeprecationWarning`` (issue 32 moved
``icdl.construct`` and ``icdl.icl`` into subpackages; docs/architecture.md has the new map).

One mechanism for every moved module, no shim files: `MOVED` maps each old dotted path
to the module that now holds its code, and [`install`][icdl.aliases.install] (called by ``import icdl``) puts
a finder first on ``sys.meta_path`` that answers an old path with the new module itself, so
``import icdl.construct.tables`` and ``from icdl.icl.evaluate import evaluate_run`` give the objects of
``icdl.construct.engine.sublayers`` and ``icdl.icl.evaluation.evaluate`` (the same module objects:
``isinstance`` checks and monkeypatches agree), after a warning naming the new path. Two old modules are
now packages of the same name that re-export their names: ``icdl.construct.variants`` (the registry) and
``icdl.icl.baselines`` (the simple baselines).

Saved artefacts name no module: a compiled model's ``model.json`` names its sublayer classes
(``icdl.construct.store``), a run's checkpoint holds tensors and its config YAML, so both load unchanged.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "install"]

# old dotted module path -> the module that holds its code now
MOVED: dict[str, str] = {
    "icdl.construct.layers": "icdl.construct.engine.layers",
    "icdl.construct.tables": "icdl.construct.engine.sublayers",
    "icdl.construct.ranged": "icdl.construct.engine.row_layers",
    "icdl.construct._kernels": "icdl.construct.engine.kernels",
    "icdl.construct.layout": "icdl.construct.engine.layout",
    "icdl.construct.terms": "icdl.construct.engine.terms",
    "icdl.construct.products": "icdl.construct.engine.products",
    "icdl.construct.sizes": "icdl.construct.engine.sizes",
    "icdl.construct.budget": "icdl.construct.bounds.budget",
    "icdl.construct.ranges": "icdl.construct.bounds.ranges",
    "icdl.construct.predict": "icdl.construct.bounds.prediction",
    "icdl.construct.contract": "icdl.construct.build.contract",
    "icdl.construct.context": "icdl.construct.build.context",
    "icdl.construct.prompt": "icdl.construct.build.prompt",
    "icdl.construct.blocks": "icdl.construct.build.blocks",
    "icdl.construct.paper": "icdl.construct.variants.paper",
    "icdl.construct.compact": "icdl.construct.variants.compact",
    "icdl.construct.no_ewml": "icdl.construct.variants.no_ewml",
    "icdl.construct.softmax": "icdl.construct.variants.softmax",
    "icdl.construct.rows": "icdl.construct.variants.rows",
    "icdl.construct.verify": "icdl.construct.check.verify",
    "icdl.construct.stream": "icdl.construct.check.stream",
    "icdl.construct.verify_report": "icdl.construct.check.report",
    "icdl.construct._written": "icdl.construct.check.written",
    "icdl.icl.train": "icdl.icl.training.train",
    "icdl.icl.checkpoint": "icdl.icl.training.checkpoint",
    "icdl.icl.interval": "icdl.icl.training.interval",
    "icdl.icl.fast": "icdl.icl.training.fast",
    "icdl.icl.launch": "icdl.icl.training.launch",
    "icdl.icl.cost": "icdl.icl.training.cost",
    "icdl.icl.kernels": "icdl.icl.baselines.kernel",
    "icdl.icl.mlp_tuned": "icdl.icl.baselines.mlp_tuned",
    "icdl.icl.gd_target": "icdl.icl.baselines.gd_target",
    "icdl.icl.evaluate": "icdl.icl.evaluation.evaluate",
    "icdl.icl.eval_parts": "icdl.icl.evaluation.baseline_runs",
    "icdl.icl.cache": "icdl.icl.evaluation.cache",
    "icdl.icl.curves": "icdl.icl.evaluation.curves",
    "icdl.icl.report": "icdl.icl.evaluation.report",
    "icdl.icl.plots": "icdl.icl.evaluation.plots",
    "icdl.icl.align": "icdl.icl.analysis.align",
    "icdl.icl.sensitivity": "icdl.icl.analysis.sensitivity",
    "icdl.icl.align_plots": "icdl.icl.analysis.align_plots",
}


class _KeepNames(ModuleType):
    """A package whose names an old path's alias does not overwrite: the import system sets the parent's
    attribute to every module it loads, and ``import icdl.construct.verify`` must leave
    ``icdl.construct.verify`` the function (as it was before the move, when ``__init__`` bound it last)."""

    def __setattr__(self, name: str, value: object) -> None:
        kept = self.__dict__.get(name)
        alias = isinstance(value, ModuleType) and value.__name__ != f"{self.__name__}.{name}"
        if alias and kept is not None and not isinstance(kept, ModuleType):
            return
        super().__setattr__(name, value)


class _Alias(importlib.abc.Loader):
    """Loads an old path as the new module: no new module object, no code run twice."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}; import it from there", DeprecationWarning, stacklevel=2
        )
        module = importlib.import_module(self.new)
        parent = sys.modules.get(spec.parent or "")
        if parent is not None and type(parent) is ModuleType:
            parent.__class__ = _KeepNames
        self.spec = module.__spec__  # the import system sets __spec__ to the old name's; put it back below
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of `MOVED` (and only those)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder of the old module paths first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
