"""Integrity manifests: the SHA-256 of every file of a directory artefact (a training checkpoint).

A checkpoint directory carries ``manifest.json``:

```text
{"format": "icdl-manifest/1", "files": {"model.safetensors": "<sha256>", "state.pt": "<sha256>"}}
```

written inside the temporary directory just before it is renamed into place
([`icdl.io.atomic_dir`][icdl.io.atomic_dir]), so a published checkpoint always has a manifest that matches it.
[`verify_manifest`][icdl.manifest.verify_manifest] recomputes every hash on read: one flipped bit in any
listed file is an [`InputError`][icdl.errors.InputError] naming the file (exit 2), never a silently different
model. A directory written before manifests existed has none; it is accepted as *legacy* (unverified) and
[`verify_manifest`][icdl.manifest.verify_manifest] returns None for it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from icdl.errors import InputError
from icdl.io import atomic_write_text, one_line

__all__ = [
    "MANIFEST",
    "MANIFEST_FORMAT",
    "file_sha256",
    "manifest_sha256",
    "verify_manifest",
    "write_manifest",
]

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "icdl-manifest/1"


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of the bytes of ``path`` (read in 1 MiB pieces)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: str | os.PathLike[str]) -> Path:
    """Write ``directory/manifest.json`` listing the SHA-256 of every other file in ``directory``."""
    d = Path(directory)
    files = {f.name: file_sha256(f) for f in sorted(d.iterdir()) if f.is_file() and f.name != MANIFEST}
    text = json.dumps({"format": MANIFEST_FORMAT, "files": files}, indent=1, sort_keys=True) + "\n"
    return atomic_write_text(d / MANIFEST, text)


def manifest_sha256(directory: str | os.PathLike[str]) -> str | None:
    """SHA-256 of ``directory/manifest.json`` (which identifies the directory's whole content), or None
    when it has no manifest (legacy)."""
    path = Path(directory) / MANIFEST
    return file_sha256(path) if path.is_file() else None


def verify_manifest(directory: str | os.PathLike[str], *, what: str = "checkpoint") -> str | None:
    """Check every file listed in ``directory/manifest.json`` against its recorded SHA-256.

    Returns the manifest's own SHA-256, or None for a legacy directory without a manifest. A damaged
    manifest, a missing listed file or a hash mismatch is one InputError line naming the file.
    """
    d = Path(directory)
    path = d / MANIFEST
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"{what} manifest {str(path)!r} is unreadable or corrupt ({one_line(exc)})"
        raise InputError(msg) from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
        raise InputError(f"{what} manifest {str(path)!r} is not an {MANIFEST_FORMAT} manifest")
    for name, digest in sorted(files.items()):
        f = d / str(name)
        if "/" in str(name) or not f.is_file():
            raise InputError(f"{what} file {str(f)!r} listed in its manifest is missing")
        if file_sha256(f) != digest:
            raise InputError(
                f"{what} file {str(f)!r} does not match its manifest (SHA-256 differs): the file was changed "
                "or damaged after it was written; restore it or train into a new --out"
            )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
