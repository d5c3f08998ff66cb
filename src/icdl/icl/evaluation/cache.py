"""Integrity of evaluation caches (``RUN/eval/<suite>.json``, written by
[`icdl.icl.evaluation.evaluate`][icdl.icl.evaluation.evaluate]).

[`seal`][icdl.icl.evaluation.cache.seal] adds an ``integrity`` entry to a result before it is written:

```text
"integrity": {"checkpoint_manifest_sha256": ..., "request_sha256": ..., "content_sha256": ...}
```

the SHA-256 of the evaluated checkpoint's ``manifest.json`` (None for a legacy checkpoint), of the
evaluation request (suite, prompts, seed, options; canonical JSON) and of the result itself (canonical
JSON without ``integrity`` and ``from_cache``). [`trusted`][icdl.icl.evaluation.cache.trusted] recomputes all
three: a cache edited by hand (every R² set to 0.999), written for other options, or left over from a
checkpoint that was rewritten at the same step no longer matches, and the caller recomputes it instead of
trusting it. A cache without ``integrity`` (written before this check) is not trusted either; it is simply
recomputed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from icdl.icl.training.checkpoint import find_checkpoint
from icdl.manifest import verify_manifest

__all__ = ["canonical_sha256", "checkpoint_digest", "result_content_sha256", "seal", "trusted"]

_SKIP = ("integrity", "from_cache")


def canonical_sha256(value: Any) -> str:
    """SHA-256 of ``value`` as canonical JSON (sorted keys, no spaces, NaN written as null)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def result_content_sha256(result: dict[str, Any]) -> str:
    """SHA-256 of a result without its ``integrity`` and ``from_cache`` entries."""
    return canonical_sha256({k: v for k, v in result.items() if k not in _SKIP})


def checkpoint_digest(run_dir: str | Path) -> str | None:
    """SHA-256 of the manifest of the run's newest checkpoint (verifying the checkpoint against it: a
    damaged checkpoint is an InputError), or None for a legacy checkpoint without a manifest."""
    ck = find_checkpoint(run_dir)
    return None if ck is None else verify_manifest(ck, what="checkpoint")


def seal(result: dict[str, Any], run_dir: str | Path, request: Any) -> dict[str, Any]:
    """``result`` with its ``integrity`` entry (see the module docstring); call it just before writing."""
    out = {k: v for k, v in result.items() if k not in _SKIP}
    out["integrity"] = {
        "checkpoint_manifest_sha256": checkpoint_digest(run_dir),
        "request_sha256": canonical_sha256(request),
        "content_sha256": result_content_sha256(out),
    }
    return out


def trusted(cached: dict[str, Any], run_dir: str | Path, request: Any | None = None) -> bool:
    """Whether a cached result may be reused: its content, request (when given) and checkpoint still
    match the hashes it recorded."""
    seal_ = cached.get("integrity")
    if not isinstance(seal_, dict):
        return False
    if seal_.get("content_sha256") != result_content_sha256(cached):
        return False
    if request is not None and seal_.get("request_sha256") != canonical_sha256(request):
        return False
    return bool(seal_.get("checkpoint_manifest_sha256") == checkpoint_digest(run_dir))
