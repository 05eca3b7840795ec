"""Drop nodes whose outputs no graph output depends on, and unused constants."""
from __future__ import annotations

from ..ir import Graph, Node
from ..runtime.host import outer_scope_names


def unfused_inputs(node: Node) -> set:
    """Every input of the nodes a fused `node` replaced (nested fusions too): a fused node that
    cannot lower runs them instead (partition.unfuse), so their constants stay."""
    found: set = set()
    stack = list(node.unfused)
    while stack:
        n = stack.pop()
        found.update(i for i in n.inputs if i)
        stack.extend(n.unfused)
    return found


def remove_dead_nodes(graph: Graph) -> Graph:
    g = graph.copy()
    needed = set(g.outputs)
    keep = []
    for node in reversed(g.nodes):
        if any(o in needed for o in node.outputs if o):
            keep.append(node)
            needed.update(i for i in node.inputs if i)
            needed.update(unfused_inputs(node))  # the constants its fallback would read
            if any(isinstance(v, object) and type(v).__name__ == "GraphProto" for v in node.attrs.values()):
                needed.update(outer_scope_names(node))
    g.nodes = list(reversed(keep))
    used = needed | set(g.inputs)
    g.values = {k: v for k, v in g.values.items() if k in used or not v.is_const}
    return g
