"""clglow's graph IR: typed values with static or symbolic shapes, nodes, graphs."""
from .graph import Graph, Node, Value, Shape, Dim

__all__ = ["Graph", "Node", "Value", "Shape", "Dim"]
