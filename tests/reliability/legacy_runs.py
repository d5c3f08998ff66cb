"""Turn a run directory written today into one of the layout before manifests and config seals."""

from __future__ import annotations

from pathlib import Path

from safetensors import safe_open
from safetensors.torch import load_file, save_file

from icdl.manifest import MANIFEST

SEAL_PREFIX = "# icdl-sha256: "  # icdl.manifest.SEAL_PREFIX, spelled out: the older layout has none


def make_legacy(run: Path) -> None:
    """Drop every checkpoint manifest and the config seal, and mark the weights ``icdl-icl-v1`` (what the
    version before manifests wrote), so that the run is of the older layout throughout."""
    config = run / "config.yaml"
    text = config.read_text()
    if text.startswith(SEAL_PREFIX):
        config.write_text(text.split("\n", 1)[1])
    for ck in (run / "checkpoints").glob("step_*"):
        (ck / MANIFEST).unlink(missing_ok=True)
        file = ck / "model.safetensors"
        with safe_open(str(file), framework="pt") as fh:
            meta = dict(fh.metadata() or {})
        meta["format"] = "icdl-icl-v1"
        save_file(load_file(str(file)), str(file), meta)
