"""The ``icdl`` command line.

Each subcommand lives in its own module of this package and is imported only when it runs, so
``icdl --help`` stays fast. Exit codes: 0 ok, 2 bad input (one line on stderr), 1 internal
error (with a traceback, since that is a bug).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator

import click

# Before torch is imported (it reads this once): allocations of 2 MB and more get transparent huge pages.
# A compiled model's sublayer returns a new T x D state (``out = H + f(H)``), and without them each fresh
# state costs a page fault per 4 KB: measured 0.12 s CPU per 194 MiB state (N=8, K=256, n=1024 rows), 70%
# of that forward; 0.03 s with them (benchmarks/bench_verify.py). An explicit value is kept.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from icdl import __version__
from icdl.errors import InputError

# name -> (module, attribute, one-line help shown by `icdl --help` without importing the module)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("icdl.cli.demo", "demo", "Run the main job on a small default, end to end."),
    "approx": ("icdl.cli.approx", "approx", "Fit a sum-of-ReLU approximation to a scalar function."),
    "theory": ("icdl.cli.theory", "theory", "Print the paper's sizes, head counts and bounds."),
    "construct": ("icdl.cli.construct", "construct", "Compile the GD transformer and verify it against GD."),
    "train": ("icdl.cli.train", "train", "Pretrain an ICL transformer (resumable; torchrun for DDP)."),
    "evaluate": ("icdl.cli.evaluate", "evaluate", "R² curves of a run against baselines on a suite."),
    "align": (
        "icdl.cli.align",
        "align",
        "Which algorithm the trained model runs: vs baselines, GD, compiled.",
    ),
    "report": ("icdl.cli.report", "report", "Render plots and a markdown report for a run."),
    "check": ("icdl.cli.check", "check", "Verify a run directory or saved construction (file hashes)."),
    "groundtruth": (
        "icdl.cli.groundtruth",
        "groundtruth",
        "Draw labelled compiled models (ledger + prompts) for circuit discovery.",
    ),
    "score": ("icdl.cli.score", "score", "In-context score estimation for diffusion models (docs/score.md)."),
}


# Set by the console script (`run`): this process runs one command and ends.
_CONSOLE: list[bool] = [False]
# Set (`skip_teardown`) by a command whose process, once its output is written, holds nothing that needs the
# interpreter's teardown: no open files, no child processes or threads of its own.
_SKIP_TEARDOWN: list[bool] = [False]


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector paused, then (in the console script's process, [`run`][icdl.cli.run])
    every object alive moved out of its reach (``gc.freeze``), and the collector restored: for imports such
    as torch's, which create a few hundred thousand objects that live as long as the process, and whose
    collections (during the import, or the first full one after it) cost about 0.15 s of a 1.5 s import.
    Not frozen in a process that calls [`main`][icdl.cli.main] itself (a test's garbage stays collectable)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _CONSOLE[0]:
            gc.freeze()
        if enabled:
            gc.enable()


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, (mod, _, _) in COMMANDS.items() if importlib.util.find_spec(mod) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[cmd_name]
        try:
            with paused_gc():
                return getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                return None
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="\b\nExamples:\n  icdl demo\n  icdl construct -N 3 -K 8 -L 5\n  icdl construct --help",
)
@click.version_option(__version__, "-V", "--version", prog_name="icdl")
def cli() -> None:
    """icdl — a transformer that trains a deep network by gradient descent in its forward pass.

    Compile and verify the construction of Wu et al. (ICML 2025), pretrain ICL transformers on
    random deep-network tasks, and evaluate them against honest baselines.
    """


def _fail(message: str, code: int = 2) -> None:
    prog = "icdl"
    line = " ".join(str(message).split())  # one line, always
    click.echo(f"{prog}: error: {line}", err=True)
    sys.exit(code)


def skip_teardown() -> None:
    """Let the ``icdl`` console script ([`run`][icdl.cli.run]) exit without the interpreter's teardown once
    this command returns: tearing down torch takes about half a second, longer than a small command's own
    work. Only for commands whose every output is complete and closed when they return."""
    _SKIP_TEARDOWN[0] = True


#: errno values of a failed write to standard output (``> /dev/full``, a closed descriptor, an I/O error).
_STDOUT_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EBADF, errno.EDQUOT})


def _stdout_failed(exc: OSError) -> None:
    """A write to standard output failed: a closed pipe (``| head``) ends quietly with exit 0, anything else
    is one line on stderr with exit 2. Standard output is pointed at /dev/null first, so that the flush at
    interpreter exit does not fail a second time."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    if isinstance(exc, BrokenPipeError):
        os._exit(0)  # the reader has all it wanted; nothing is left to say
    click.echo(f"icdl: error: cannot write standard output: {' '.join(str(exc.strerror).split())}", err=True)
    sys.stderr.flush()
    os._exit(2)


def run() -> None:
    """The ``icdl`` console script and ``python -m icdl``: [`main`][icdl.cli.main]; a command that called
    [`skip_teardown`][icdl.cli.skip_teardown] exits with its code right after its output is flushed.

    Standard output that is closed (``>&-``) is refused at once (exit 2, one line); a full or failing one
    (``> /dev/full``) is exit 2 with one line when the output is written or flushed; a reader that closed
    the pipe early (``| head -c 1``) ends the command quietly (exit 0)."""
    _CONSOLE[0] = True
    if sys.stdout is None:
        _fail("standard output is closed; redirect it to a file or to /dev/null")
    try:
        main()
    except SystemExit as exc:
        if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):
            # click met EPIPE (the reader closed the pipe), wrapped stdout and raised SystemExit(1).
            _stdout_failed(BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE)))
        try:
            sys.stdout.flush()
        except OSError as err:
            _stdout_failed(err)
        if not _SKIP_TEARDOWN[0] or not (exc.code is None or isinstance(exc.code, int)):
            raise
        sys.stderr.flush()
        os._exit(exc.code or 0)
    except BrokenPipeError as exc:
        _stdout_failed(exc)
    except OSError as exc:
        # A stream write carries no file name; a file's error does (and is an InputError line already).
        if exc.errno not in _STDOUT_ERRNOS or exc.filename is not None:
            raise
        _stdout_failed(exc)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI, turning user mistakes into one-line errors (exit 2)."""
    _SKIP_TEARDOWN[0] = False
    try:
        rv = cli.main(args=argv, prog_name="icdl", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(2)
    except click.UsageError as exc:  # includes BadParameter, NoSuchOption, MissingParameter
        _fail(exc.format_message())
    except InputError as exc:
        _fail(str(exc))
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except MemoryError:
        # Every command estimates its memory first (icdl.budget); this is the safety net.
        _fail("out of memory; try smaller sizes (the estimate before the run was too low)")
    sys.exit(rv if isinstance(rv, int) else 0)
