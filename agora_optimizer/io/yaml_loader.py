"""The YAML reader of agora's documents: YAML's safe types, and two things PyYAML lets through refused.

- A key said twice in one mapping: PyYAML keeps the last silently (a task with
  ``runtimeInSeconds`` 10 and 99999 would be planned with 99999); YAML itself says keys are unique.
  Keys brought in by a merge (``<<: *defaults``) may still be overridden, as YAML means them to be.
- Aliases that expand the document far beyond what is written: nine nested lists of nine aliases
  (the "billion laughs", 500 bytes) are 9**9 values to anything that walks or prints them. The
  parser shares an aliased value rather than copying it, so reading is cheap; the expanded size is
  counted before the values are built, and more than :data:`MAX_ALIAS_GROWTH` times the values
  written (and more than :data:`MIN_ALIAS_LIMIT`) is refused, as is an alias inside its own anchor.

Both are checked on the nodes PyYAML composes (libyaml's parser where PyYAML was built with it, 8x
faster on a catalog, else the Python one), before any value is built; errors name the file, the
field path and the line.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agora_optimizer.errors import FieldError, InputFileError
from agora_optimizer.model.workflow import shown

MAX_ALIAS_GROWTH = 10  # aliases may expand a document to this many times the values written ...
MIN_ALIAS_LIMIT = 1_000_000  # ... or to this many values, whichever is more

_MERGE_TAG = "tag:yaml.org,2002:merge"
_VALUE_TAG = "tag:yaml.org,2002:value"
_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str, source: str) -> Any:
    """The one document in ``text``, of YAML's safe types; ``source`` (the file) is named in errors.

    Raises FieldError for a duplicate key or a recursive alias, InputFileError for an alias bomb;
    PyYAML's own errors (``yaml.YAMLError``) pass through for the caller to word.
    """
    loader = _StrictLoader(text, source)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _StrictLoader(_BaseLoader):
    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self.source = source

    def construct_document(self, node: Node) -> Any:
        _check_nodes(self, node)
        return super().construct_document(node)


def _check_nodes(loader: _StrictLoader, root: Node) -> None:
    """Refuse a duplicate key, an alias inside its own anchor, or aliases that expand too far.

    One depth-first walk in document order over the composed nodes. An alias is the very node of
    its anchor, met again: done by then (its expanded size known), or still open on the walk's path
    (recursive). A node's expanded size is one plus its children's.
    """
    expanded: dict[Node, int] = {}
    open_nodes: set[Node] = set()
    stack: list[tuple[Node, str, list[Node] | None]] = [(root, "", None)]
    while stack:
        node, where, closing = stack.pop()
        if closing is not None:
            open_nodes.discard(node)
            expanded[node] = 1 + sum(expanded[child] for child in closing)
            continue
        if node in expanded:
            continue
        if node in open_nodes:
            raise FieldError(
                loader.source,
                where or "<document>",
                f"is an alias of a value that contains it (anchor at line {node.start_mark.line + 1}): "
                "a document without end",
            )
        open_nodes.add(node)
        children = _children(loader, node, where)
        stack.append((node, where, [child for child, _ in children]))
        stack.extend((child, path, None) for child, path in reversed(children))
    written = len(expanded)
    limit = max(MIN_ALIAS_LIMIT, MAX_ALIAS_GROWTH * written)
    if expanded[root] > limit:
        raise InputFileError(
            loader.source,
            f"YAML aliases expand its {written} values to {expanded[root]}, more than the {limit} allowed "
            f"({MAX_ALIAS_GROWTH} times those written, at least {MIN_ALIAS_LIMIT}): a 'billion laughs'? "
            "Write the values out",
        )


def _children(loader: _StrictLoader, node: Node, where: str) -> list[tuple[Node, str]]:
    """The nodes under ``node`` with their field paths; a mapping's keys are checked to be unique."""
    if isinstance(node, SequenceNode):
        return [(item, f"{where}[{i}]") for i, item in enumerate(node.value)]
    if not isinstance(node, MappingNode):
        return []
    found: list[tuple[Node, str]] = []
    first_of: dict[Any, ScalarNode] = {}
    for key_node, value_node in node.value:
        found.append((key_node, where))
        if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
            found.append((value_node, where))  # a merge's values are this mapping's; a complex key is refused later
            continue
        key = "=" if key_node.tag == _VALUE_TAG else loader.construct_object(key_node)  # built once, kept
        path = f"{where}.{key}" if where else str(key)
        try:
            first = first_of.setdefault(key, key_node)
        except TypeError:  # not hashable: PyYAML refuses it with its own error
            first = key_node
        if first is not key_node:
            raise FieldError(
                loader.source,
                where or "<document>",
                f"duplicate key {shown(key)} at line {key_node.start_mark.line + 1} "
                f"(first at line {first.start_mark.line + 1}): say it once",
            )
        found.append((value_node, path))
    return found
