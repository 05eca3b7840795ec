"""If on the device: never lowered, always inlined (shapes.inline_if) once its condition is known.

Why registered at all: placement (partition.place) judges the graph before any condition is
known, and with host fallback off it would refuse the If that torchvision's detection heads
guard NonMaxSuppression with. Staging (shapes.specialize) defers an If whose condition is made
in the current stage to the next one, where the condition is a constant (engine.SHAPE_INPUTS),
and puts the branch taken in its place; its nodes are then placed like any others.
"""
from __future__ import annotations

from typing import Optional

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..shapes import inlinable_if
from ..target import Target
from .base import LowerCtx, device_op


def _supports_if(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return None if inlinable_if(node) else "an If whose branches hold subgraphs runs on the host"


@device_op("If", supports=_supports_if)
def lower_if(ctx: LowerCtx) -> list:
    raise InvalidModel("an If reached planning before its condition was known (staging inlines it)",
                       node=ctx.node.name)
