"""Reading YAML input safely: a ``yaml.SafeLoader`` that refuses what PyYAML would accept silently or
spend unbounded memory on, and a file reader that checks the size before reading.

The loader refuses a key written twice in one mapping, reads ``1e-3`` as a float, keeps merge keys (``<<:
*base`` and then an override of one key), and bounds the document before anything is constructed: its
nesting depth while it is composed and its node count with every alias expanded (a few hundred bytes of
nested aliases would otherwise stand for billions of values). Used for run configs (`icdl.config`) and
``--set`` overrides.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from icdl.errors import InputError
from icdl.io import read_text

__all__ = ["MAX_YAML_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "ConfigLoader", "read_yaml"]

#: Bounds on a YAML document, checked before it is built into values (or rendered): bytes of text,
#: nesting depth, and nodes once every alias is expanded (a few hundred bytes of nested aliases would
#: otherwise stand for billions of values).
MAX_YAML_BYTES = 1 << 20
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000


class ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping (PyYAML keeps the last value
    silently), reads ``1e-3`` as a float (YAML 1.1 wants ``1.0e-3`` and yields the string "1e-3"), keeps
    merge keys (``<<: *base`` then an override of one key) and bounds the document: nesting depth
    (``MAX_YAML_DEPTH``) while it is composed, nodes with aliases expanded (``MAX_YAML_NODES``) before
    anything is constructed."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_YAML_DEPTH} levels deep", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None and _expanded_size(node) > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"expands to more than {MAX_YAML_NODES} values (aliases)", node.start_mark
            )
        return node


def _expanded_size(root: yaml.Node) -> int:
    """Nodes of the document with every alias expanded, computed once per distinct node (no expansion)."""
    memo: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) in memo:
            return memo[id(node)]
        memo[id(node)] = 1  # a cycle (a recursive alias) counts once: the constructor refuses it
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(n) for n in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        else:
            total = 1
        memo[id(node)] = min(total, MAX_YAML_NODES + 1)
        return memo[id(node)]

    return size(root)


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _mapping_without_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    # Duplicates among the keys written in this mapping; a key merged in by `<<: *base` may be overridden.
    written = [(k, v) for k, v in node.value if k.tag != _MERGE_TAG]
    loader.flatten_mapping(node)
    first: dict[Any, int] = {}
    for key_node, _ in written:
        key = loader.construct_object(key_node, deep=True)
        try:
            seen = first.get(key)
        except TypeError:  # an unhashable key: construct_mapping reports it
            continue
        if seen is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen + 1})", key_node.start_mark
            )
        first[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=True)


ConfigLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(path: Path, what: str = "config") -> Any:
    """The YAML document in ``path`` (``what`` names it in errors), read with `ConfigLoader`. A file over
    ``MAX_YAML_BYTES`` is refused before it is read; unreadable or invalid YAML, or a document nested or
    expanding past the bounds, is a one-line InputError (the message is cut, never the document's repr)."""
    try:
        size = path.stat().st_size  # before reading: a 50 MB file is refused without being read
    except OSError:
        size = 0  # read_text reports it
    text = read_text(path, what=what) if size <= MAX_YAML_BYTES else ""
    if max(size, len(text)) > MAX_YAML_BYTES:
        raise InputError(
            f"{what} {str(path)!r} is {max(size, len(text))} bytes long; a {what} is at most 1 MiB"
        )
    try:
        return yaml.load(text, Loader=ConfigLoader)  # a SafeLoader
    except yaml.YAMLError as exc:
        msg = " ".join(str(exc).split())
        raise InputError(f"{what} {str(path)!r} is not valid YAML: {msg[:500]}") from None
    except RecursionError:  # a structure deeper than the bound that slipped past it (block scalars...)
        raise InputError(f"{what} {str(path)!r} is nested too deeply") from None
