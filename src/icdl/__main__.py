"""``python -m icdl`` (and ``torchrun -m icdl train ...``) runs the CLI."""

from icdl.cli import run

if __name__ == "__main__":
    run()
