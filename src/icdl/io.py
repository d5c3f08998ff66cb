"""File output and input shared by every artefact icdl writes: atomic writes, JSON cleaning, clear errors.

* [`atomic_write`][icdl.io.atomic_write] writes a file through a temporary sibling that is renamed into place,
  so a reader (or a run killed half way) sees the old file or the new one, never half of one; the file gets
  the usual mode (``0o666`` minus the umask), so every file of one artefact has the same permissions.
* [`atomic_dir`][icdl.io.atomic_dir] does the same for a directory artefact (a checkpoint, a saved
  construction): the files are written into a temporary sibling directory, flushed, given one mode and renamed
  into place; a failure removes the temporary directory and leaves the target as it was.
* [`clean_json`][icdl.io.clean_json] turns NaN/inf into ``null`` (strict JSON) and tuples into lists.
* [`portable_path`][icdl.io.portable_path] is the form of a path recorded in an artefact: relative, never
  the writer's machine-specific absolute path (committed results are read on other machines).
* [`check_writable`][icdl.io.check_writable] says, before any work, whether an output path can be created.
* [`read_json`][icdl.io.read_json] / [`read_text`][icdl.io.read_text] read an input file and turn every
  failure (missing, unreadable, truncated, not JSON) into one [`InputError`][icdl.errors.InputError] line that
  names the file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from icdl.errors import InputError

__all__ = [
    "AppendLog",
    "atomic_dir",
    "atomic_write",
    "atomic_write_json",
    "atomic_write_text",
    "check_writable",
    "clean_json",
    "dir_mode",
    "file_mode",
    "fsync_dir",
    "one_line",
    "portable_command",
    "portable_path",
    "read_json",
    "read_text",
]


def one_line(message: object) -> str:
    """``message`` with every run of whitespace (newlines included) folded into one space."""
    return " ".join(str(message).split())


#: ``errno`` values of a write that failed for a reason of the system, not of icdl: reported as one line.
_WRITE_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENOSPC", "EFBIG", "EDQUOT", "EACCES", "EPERM", "EROFS", "ENAMETOOLONG", "EIO", "ENOTDIR")
    if hasattr(errno, name)
)


def os_error_line(exc: OSError) -> str:
    """The cause of ``exc`` in a few words (``strerror``, e.g. "File too large"), on one line."""
    return one_line(exc.strerror or exc)


@contextlib.contextmanager
def _os_errors_as_input(path: Path) -> Iterator[None]:
    """Turn an OSError of the system (disk full, file too large, read-only, permission) met while writing
    ``path`` into one [`InputError`][icdl.errors.InputError] line naming ``path`` and the cause."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        raise InputError(f"cannot write {str(path)!r}: {os_error_line(exc)}") from None


def file_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give a new file: ``0o666`` minus the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def dir_mode() -> int:
    """The mode a plain ``mkdir`` would give a new directory: ``0o777`` minus the umask."""
    return file_mode() | ((file_mode() & 0o444) >> 2)


def portable_path(path: str | os.PathLike[str]) -> str:
    """``path`` as an artefact records it: a relative path unchanged (POSIX separators); an absolute one
    relative to the working directory when it lies under it, else its last component (a run's name), so
    no committed JSON carries the absolute paths of the machine that wrote it."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    with contextlib.suppress(ValueError, OSError):
        return p.relative_to(Path.cwd()).as_posix() or "."
    return p.name or "."


def portable_command(tokens: list[str]) -> str:
    """A shell-quoted command line with every absolute-path token made
    [`portable_path`][icdl.io.portable_path] (``--out=/abs/x`` included)."""

    def one(tok: str) -> str:
        key, eq, val = tok.partition("=")
        if eq and key.startswith("-") and os.path.isabs(val):
            return f"{key}={portable_path(val)}"
        return portable_path(tok) if os.path.isabs(tok) else tok

    return " ".join(shlex.quote(one(t)) for t in tokens)


def clean_json(value: Any) -> Any:
    """A copy of ``value`` that strict JSON accepts: non-finite floats -> None, tuples -> lists, dict keys
    -> str."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (a rename) to disk where the platform allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _temp_sibling(path: Path, binary: bool) -> Iterator[tuple[IO[Any], str]]:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as fh:
            yield fh, tmp
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())  # mkstemp creates 0600; give the usual mode
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[Any]], None], *, binary: bool) -> Path:
    """Call ``write(fh)`` on a temporary file next to ``path``, then rename it onto ``path``.

    The parent directory is created when missing. On any error the temporary file is removed and
    ``path`` keeps its old content.
    """
    target = Path(path)
    with _os_errors_as_input(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        with _temp_sibling(target, binary) as (fh, _):
            write(fh)
    return target


@contextlib.contextmanager
def atomic_dir(
    path: str | os.PathLike[str],
    *,
    replace: bool = False,
    prefix: str | None = None,
    finish: Callable[[Path], object] | None = None,
) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; on a clean exit, publish it as ``path``.

    The caller writes the artefact's files into the yielded directory. On exit every file gets
    [`file_mode`][icdl.io.file_mode] (whatever library wrote it: safetensors creates its files 0600) and is
    flushed to disk, ``finish(tmp)`` runs (e.g. to write an integrity manifest over the files), the directory
    gets [`dir_mode`][icdl.io.dir_mode] and is renamed onto ``path``. An existing ``path`` is renamed away
    and removed when ``replace``, else it is an InputError (also when another process published ``path``
    meanwhile). On any exception the temporary directory is
    removed and ``path`` is untouched. ``prefix`` names the temporary directory (default ``.<name>.``) so that
    a caller can find and remove the leftovers of a killed process.
    """
    target = Path(path)
    with _os_errors_as_input(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=prefix or f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            yield tmp
            if finish is not None:
                finish(tmp)
            for f in sorted(tmp.rglob("*")):
                if f.is_file():
                    os.chmod(f, file_mode())
                    with open(f, "rb") as fh:
                        os.fsync(fh.fileno())
                elif f.is_dir():
                    os.chmod(f, dir_mode())
                    fsync_dir(f)
            os.chmod(tmp, dir_mode())  # mkdtemp makes the directory 0700
            fsync_dir(tmp)
            _publish(tmp, target, replace)
            fsync_dir(target.parent)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: Path, target: Path, replace: bool) -> None:
    """Rename ``tmp`` onto ``target``. An existing ``target`` is renamed away first and then deleted when
    ``replace`` (so ``target`` is always whole), else refused; another process publishing the same target
    at the same moment (two ``icdl construct --save DIR``) is one InputError line, not a crash."""
    taken = f"{str(target)!r} already exists (written by another process meanwhile?); choose a new directory"
    old: Path | None = None
    if target.exists() or target.is_symlink():
        if not replace:
            raise InputError(taken)
        old = target.with_name(f".{target.name}.{os.getpid()}.old")
        with contextlib.suppress(FileNotFoundError):  # another writer moved it first
            os.replace(target, old)
    published = False
    try:
        os.replace(tmp, target)
        published = True
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR, errno.ENOTDIR):
            raise InputError(taken) from None
        raise
    finally:
        if old is not None and published:
            shutil.rmtree(old, ignore_errors=True)
        elif old is not None:  # not replaced after all: put the old one back
            with contextlib.suppress(OSError):
                os.replace(old, target)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (see [`atomic_write`][icdl.io.atomic_write])."""

    def write(fh: IO[Any]) -> None:
        fh.write(text)

    return atomic_write(path, write, binary=False)


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 1) -> Path:
    """Write ``clean_json(obj)`` as strict JSON to ``path`` atomically."""
    text = json.dumps(clean_json(obj), indent=indent, allow_nan=False)
    return atomic_write_text(path, text + "\n")


def check_writable(
    path: str | os.PathLike[str], *, what: str, directory: bool = False, atomic: bool | None = None
) -> Path:
    """Raise [`InputError`][icdl.errors.InputError] unless ``path`` can be written (checked before any work
    starts).

    ``directory=False``: a file in an existing directory; it may exist (it is replaced by a rename) but
    must not be a directory. ``directory=True``: a directory that may exist; missing parents are created
    at write time, so the nearest existing ancestor must be a writable directory. Every missing component
    must fit the file system's name limit; when ``atomic`` (default: for a file) the last one must also
    leave room for the temporary sibling ``.NAME.XXXXXXXX.tmp`` it is written through. Nothing is created
    here.
    """
    p = Path(path)
    margin = _TMP_MARGIN if (not directory if atomic is None else atomic) else 0
    try:
        return _check_writable(p, what, directory, margin)
    except OSError as exc:  # e.g. a name too long for the file system (ENAMETOOLONG), a symlink loop
        raise InputError(f"{what} {str(p)!r}: {os_error_line(exc)}") from None


#: Bytes the temporary sibling of an atomic write adds to a name (``.`` + ``.XXXXXXXX.tmp``).
_TMP_MARGIN = 14


def _check_writable(p: Path, what: str, directory: bool, margin: int = 0) -> Path:
    if p.is_symlink() and not p.exists():
        # A dangling link: the write would follow it (or the rename replace it); neither is what was meant.
        raise InputError(f"{what} {str(p)!r} is a dangling symbolic link (to {os.readlink(p)!r})")
    if p.exists():
        if directory and not p.is_dir():
            raise InputError(f"{what} {str(p)!r} exists and is not a directory")
        if not directory and p.is_dir():
            raise InputError(f"{what} {str(p)!r} is a directory")
        # A file is replaced by a rename, which needs a writable parent; a directory is written into.
        where = p if directory else p.absolute().parent
        if not os.access(where, os.W_OK | os.X_OK):
            raise InputError(f"{what} {str(p)!r} is not writable")
        return p
    parent = p.absolute().parent
    if not directory and not parent.exists():
        raise InputError(f"{what} {str(p)!r}: directory {str(p.parent)!r} does not exist")
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{what} {str(p)!r}: {str(parent)!r} is not a directory")
    _check_names(p, parent, what, margin)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{what} {str(p)!r}: directory {str(parent)!r} is not writable")
    return p


def _check_names(p: Path, existing: Path, what: str, margin: int = 0) -> None:
    """Refuse a missing component of ``p`` (below its nearest existing ancestor ``existing``) longer than
    the file system allows, anywhere in the path: found now, before any directory of it is created. The
    last component must fit ``margin`` more bytes (the temporary sibling of an atomic write)."""
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    parts = p.absolute().relative_to(existing).parts
    for i, name in enumerate(parts):
        if len(os.fsencode(name)) + (margin if i == len(parts) - 1 else 0) > limit:
            shown = name if len(name) <= 40 else f"{name[:20]}...{name[-8:]}"
            raise InputError(
                f"{what} {_short(str(p))!r}: the name {shown!r} is {len(os.fsencode(name))} bytes long, more "
                f"than the file system allows ({limit}"
                + (f", less {margin} for its temporary copy" if i == len(parts) - 1 and margin else "")
                + "): File name too long"
            )


def _short(text: str, limit: int = 200) -> str:
    """``text`` cut to about ``limit`` characters (the middle elided), for a message."""
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def read_text(path: str | os.PathLike[str], *, what: str = "file") -> str:
    """The UTF-8 text of ``path``; any failure is one InputError line naming the file."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} {str(p)!r} not found") from None
    except UnicodeDecodeError:
        raise InputError(f"{what} {str(p)!r} is corrupt (not UTF-8 text)") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {str(p)!r}: {exc.strerror or one_line(exc)}") from None


def read_json(path: str | os.PathLike[str], *, what: str = "file") -> Any:
    """The JSON value in ``path``; a missing, unreadable, truncated or non-JSON file is one InputError
    line naming the file and what is wrong."""
    text = read_text(path, what=what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # Cut off: the parser ran out of text, or a string runs to the end (json reports where it starts).
        ended = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        kind = "truncated" if ended else "corrupt"
        raise InputError(
            f"{what} {str(path)!r} is {kind} (invalid JSON at line {exc.lineno} column {exc.colno})"
        ) from None


class AppendLog:
    """A file that grows by whole lines (``metrics.jsonl``): [`append`][icdl.io.AppendLog.append] writes
    one line with a single ``write`` on an ``O_APPEND`` descriptor; when the system refuses it (disk full,
    a file-size limit, ...) the file is cut back to its previous length, so no partial line is left, and
    the error is one [`InputError`][icdl.errors.InputError] line naming the file and the cause."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with _os_errors_as_input(self.path):
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, file_mode())

    def append(self, line: str) -> None:
        """Append ``line`` plus a newline, all or nothing."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        data = (line + "\n").encode()
        size = os.fstat(self._fd).st_size
        with _os_errors_as_input(self.path):
            try:
                while data:  # after a short write, the next write raises the system's reason (EFBIG...)
                    written = os.write(self._fd, data)
                    if written == 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    data = data[written:]
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, size)
                raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
