"""If, Loop and Scan on the device: never lowered, always put in place by staging once what
decides them is known (If: shapes.inline_if; Loop: passes/unroll_loop.py, one iteration at a
time; Scan: every step at once, its length being the scan inputs' extent).

Why registered at all: placement (partition.place) judges the graph before any condition is
known, and with host fallback off it would refuse the If that torchvision's detection heads
guard NonMaxSuppression with, or the Loop of onnx's expanded Range. Staging (shapes.specialize)
defers an If or Loop whose condition (trip count) is made in the current stage to the next one,
where it is a constant (engine.SHAPE_INPUTS), and puts the branch taken (the iterations) in its
place; their nodes are then placed like any others. A Loop that cannot be unrolled reaches
placement with its reason (passes.unroll_loop.loop_refusal) and runs on the host.
"""
from __future__ import annotations

from typing import Optional

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..passes.unroll_loop import loop_refusal, scan_refusal
from ..shapes import inlinable_if
from ..target import Target
from .base import LowerCtx, device_op


def _supports_if(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return None if inlinable_if(node) else "an If whose branches hold subgraphs runs on the host"


@device_op("If", supports=_supports_if)
def lower_if(ctx: LowerCtx) -> list:
    raise InvalidModel("an If reached planning before its condition was known (staging inlines it)",
                       node=ctx.node.name)


def _supports_loop(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return loop_refusal(node, graph)


@device_op("Loop", supports=_supports_loop)
def lower_loop(ctx: LowerCtx) -> list:
    raise InvalidModel("a Loop reached planning before its trip count and condition were known (staging "
                       "unrolls it)", node=ctx.node.name)


def _supports_scan(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return scan_refusal(node, graph)


@device_op("Scan", supports=_supports_scan)
def lower_scan(ctx: LowerCtx) -> list:
    raise InvalidModel("a Scan reached planning before its length was known (staging unrolls it)",
                       node=ctx.node.name)
