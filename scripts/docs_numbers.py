"""Regenerate the numbers in README.md and docs/ from the committed JSON they were measured into.

A number in the docs is written between two markers that name its source::

    <!-- json:docs/results/construct_reference/relu.json:eps_grad .1e -->4.1e-15<!-- /json -->

``FILE:KEY FORMAT``: ``FILE`` relative to the repository root; ``KEY`` a dotted path into the JSON (a
list index is a number, ``field=value`` picks the list element whose ``field`` is ``value``); ``A/B``
(two such paths) is their ratio; ``FORMAT`` a Python format spec (``.1e`` writes ``4.1e-15``, exponents
without ``+`` or leading zeros, as the docs write them; ``,`` writes ``1,749``) — ``.3g`` when omitted.
The headline tables between ``<!-- curves:NAME -->`` and ``<!-- /curves -->`` come from
``docs/results/curves/NAME.json``
([`icdl.icl.evaluation.curves.fill_markers`][icdl.icl.evaluation.curves.fill_markers]).

``python scripts/docs_numbers.py`` rewrites README.md and docs/**/*.md in place; ``--check`` only says
which files would change (exit 1), as ``tests/test_docs_numbers.py`` does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

from icdl.errors import InputError
from icdl.icl.evaluation.curves import fill_markers

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(
    r"<!-- json:(?P<file>[^:\s]+):(?P<key>\S+)(?: (?P<fmt>\S+))? -->(?P<body>.*?)<!-- /json -->"
)
CURVES = re.compile(r"<!-- curves:([^\s:>]+)")


@cache
def _load(root: Path, file: str) -> Any:
    path = root / file
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"json marker: cannot read {file}: {exc}") from exc


def lookup(data: Any, key: str, where: str) -> Any:
    """The value at dotted path ``key`` in ``data`` (``where`` names the marker in errors)."""
    value = data
    for part in key.split("."):
        if isinstance(value, list) and "=" in part:
            field, want = part.split("=", 1)
            hits = [v for v in value if isinstance(v, dict) and str(v.get(field)) == want]
            if len(hits) != 1:
                raise InputError(f"{where}: {len(hits)} list elements have {part}")
            value = hits[0]
        elif isinstance(value, list) and part.lstrip("-").isdigit():
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise InputError(f"{where}: no key {part!r}")
    return value


def render(value: Any, fmt: str) -> str:
    """``value`` written with the format spec ``fmt``; exponents as ``4.1e-15`` / ``6.0e6``."""
    text = (
        format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    )
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), text)


def fill_json(text: str, root: Path = ROOT) -> str:
    """``text`` with every ``<!-- json:... -->`` marker's body rewritten from its JSON."""

    def one(m: re.Match[str]) -> str:
        where = f"json marker {m.group('file')}:{m.group('key')}"
        data = _load(root, m.group("file"))
        parts = m.group("key").split("/")
        values = [lookup(data, k, where) for k in parts]
        value = values[0] if len(values) == 1 else values[0] / values[1]
        body = render(value, m.group("fmt") or ".3g")
        return m.group(0)[: m.start("body") - m.start()] + body + "<!-- /json -->"

    return MARKER.sub(one, text)


def fill(text: str, root: Path = ROOT) -> str:
    """``text`` with its json markers and curves tables regenerated from the committed JSON."""
    text = fill_json(text, root)
    for name in sorted(set(CURVES.findall(text))):
        if not (root / "docs" / "results" / "curves" / f"{name}.json").is_file():
            raise InputError(f"curves marker {name!r}: no docs/results/curves/{name}.json")
        text = fill_markers(text, _load(root, f"docs/results/curves/{name}.json"))
    return text


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and every markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, help="markdown files [README.md and docs/**/*.md]")
    ap.add_argument("--check", action="store_true", help="only list files whose numbers are stale (exit 1)")
    args = ap.parse_args(argv)
    stale = []
    try:
        for path in args.files or doc_files():
            text = path.read_text()
            new = fill(text)
            if new != text:
                stale.append(path)
                if not args.check:
                    path.write_text(new)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
