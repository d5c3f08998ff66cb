"""Integrity manifests: the SHA-256 of every file of a directory artefact (a training checkpoint).

A checkpoint directory carries ``manifest.json``:

```text
{"format": "icdl-manifest/1", "files": {"model.safetensors": "<sha256>", "state.pt": "<sha256>"}}
```

written inside the temporary directory just before it is renamed into place
([`icdl.io.atomic_dir`][icdl.io.atomic_dir]), so a published checkpoint always has a manifest that matches it.
[`verify_manifest`][icdl.manifest.verify_manifest] recomputes every hash on read: one flipped bit in any
listed file is an [`InputError`][icdl.errors.InputError] naming the file (exit 2), never a silently different
model. The manifest must list every file the artefact's format requires (``required``): an emptied or
partial ``files`` list is corruption, not a smaller artefact. A directory written before manifests existed
has none; it is accepted as *legacy* (unverified) only when the caller says its layout is the older one
(``legacy_ok``), and [`verify_manifest`][icdl.manifest.verify_manifest] returns None for it.

[`seal_text`][icdl.manifest.seal_text] / [`unseal_text`][icdl.manifest.unseal_text] do the same for a single
text file (a run's ``config.yaml``): a first line ``# icdl-sha256: <hex>`` holds the SHA-256 of the rest,
so a one-character edit or a truncation is detected on every read.
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
    "SEAL_PREFIX",
    "file_sha256",
    "manifest_sha256",
    "seal_text",
    "unseal_text",
    "verify_manifest",
    "write_manifest",
]

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "icdl-manifest/1"
#: First line of a sealed text file; the SHA-256 of the rest of the file follows.
SEAL_PREFIX = "# icdl-sha256: "


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


def verify_manifest(
    directory: str | os.PathLike[str],
    *,
    what: str = "checkpoint",
    required: tuple[str, ...] = (),
    legacy_ok: bool = True,
) -> str | None:
    """Check every file listed in ``directory/manifest.json`` against its recorded SHA-256.

    Returns the manifest's own SHA-256, or None for a legacy directory without a manifest (only when
    ``legacy_ok``; otherwise a missing manifest is an InputError). A damaged manifest, one that does not list
    a ``required`` file (emptied or partial), a missing listed file or a hash mismatch is one InputError
    line naming the file.
    """
    d = Path(directory)
    path = d / MANIFEST
    if not path.is_file():
        if legacy_ok and not path.exists():
            return None
        raise InputError(
            f"{what} {str(d)!r} has no {MANIFEST}, which its format requires: the {what} was damaged "
            "(restore it, or train into a new --out)"
        )
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"{what} manifest {str(path)!r} is unreadable or corrupt ({one_line(exc)[:200]})"
        raise InputError(msg) from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
        raise InputError(f"{what} manifest {str(path)!r} is not an {MANIFEST_FORMAT} manifest")
    for name in required:
        if not isinstance(files.get(name), str):
            raise InputError(
                f"{what} manifest {str(path)!r} does not list {name!r}, which the format requires: "
                "the manifest was emptied or damaged"
            )
    for name, digest in sorted(files.items()):
        f = d / str(name)
        if "/" in str(name) or not f.is_file():
            raise InputError(f"{what} file {str(f)[:300]!r} listed in its manifest is missing")
        if file_sha256(f) != digest:
            raise InputError(
                f"{what} file {str(f)!r} does not match its manifest (SHA-256 differs): the file was changed "
                "or damaged after it was written; restore it or train into a new --out"
            )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal_text(text: str) -> str:
    """``text`` preceded by a line ``# icdl-sha256: <SHA-256 of text>`` (a YAML comment)."""
    return f"{SEAL_PREFIX}{hashlib.sha256(text.encode('utf-8')).hexdigest()}\n{text}"


def unseal_text(text: str, *, name: str) -> str | None:
    """The body of a sealed ``text`` (see [`seal_text`][icdl.manifest.seal_text]), or None when it carries
    no seal line. A seal that does not match the body (an edit, a truncation) is one InputError naming
    ``name``."""
    if not text.startswith(SEAL_PREFIX):
        return None
    head, sep, body = text.partition("\n")
    digest = head[len(SEAL_PREFIX) :].strip()
    if not sep or hashlib.sha256(body.encode("utf-8")).hexdigest() != digest:
        raise InputError(
            f"{name} does not match its sha256 seal (edited or damaged after it was written); restore it "
            "(the run's checkpoints hold the config they were trained with) or train into a new --out"
        )
    return body
