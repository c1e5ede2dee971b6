"""YAML loading with a node budget: an alias bomb is refused before it is built, in well under a second.

PyYAML's safe loader runs no code, but aliases still let a few hundred bytes stand for billions of values
(ten levels of ten aliases = 10^10 strings, "billion laughs"). The document is composed first (a graph whose
aliases are shared nodes, small), its size *with every alias expanded* is counted on that graph (each node once,
memoised), and only a document under the budget is constructed. Anything that later walks the values (an error
message's repr, a copy, a comparison) is then bounded too.
"""

from __future__ import annotations

from typing import Any

import yaml

from vramctl.core.errors import BadInputError

MAX_EXPANDED_NODES = 1_000_000
"""Scalars, sequences and mappings after alias expansion. A deployment spec or a saved profile is a few hundred;
20,000 aliased requirements are 100,000. A bomb of ten levels of ten is 10^10."""


class YamlBudgetError(BadInputError):
    """A YAML document that expands past the node budget, or refers to itself through an alias."""


def load_yaml(
    text: str,
    *,
    loader: type[yaml.SafeLoader] = yaml.SafeLoader,
    max_nodes: int = MAX_EXPANDED_NODES,
) -> Any:
    """`yaml.load(text, loader)` for one document, refusing a document larger than `max_nodes` once its aliases
    are expanded (YamlBudgetError, a BadInputError); parse errors are PyYAML's as usual."""
    instance = loader(text)
    try:
        node = instance.get_single_node()
        if node is None:
            return None
        expanded_size(node, max_nodes=max_nodes)
        return instance.construct_document(node)
    finally:
        instance.dispose()


def expanded_size(root: yaml.Node, *, max_nodes: int) -> int:
    """How many nodes `root` stands for with every alias expanded; YamlBudgetError past `max_nodes` or on a cycle.

    Iterative (a document nested 100,000 deep is not a RecursionError here) and linear in the composed graph."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            if total > max_nodes:
                raise YamlBudgetError(
                    f"the YAML expands to more than {max_nodes:,} values through its aliases (&anchor / *alias); "
                    "an alias bomb? write the values out"
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise YamlBudgetError(
                "the YAML refers to itself through an alias (&anchor inside its own *alias)"
            )
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            child_key = id(child)
            if child_key in on_path:
                raise YamlBudgetError(
                    "the YAML refers to itself through an alias (&anchor inside its own *alias)"
                )
            if child_key not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
