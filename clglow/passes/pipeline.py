"""The load-time pass pipeline, in order. Each pass is a pure Graph -> Graph function."""
from __future__ import annotations

import logging
from typing import Callable

from ..ir import Graph
from .batchnorm import fold_batchnorm, fold_channel_scale
from .dead_code import remove_dead_nodes
from .fold_constants import fold_constants
from .fold_gather_add import fold_gather_add
from .fuse_conv import fuse_conv
from .fuse_attention import fuse_attention
from .fuse_channel_shuffle import fuse_channel_shuffle
from .fuse_elementwise import fuse_elementwise
from .fuse_layernorm import fuse_channel_norm, fuse_layernorm
from .fuse_rotary import fuse_rotary
from .fuse_softmax import fuse_softmax
from .fuse_matmul import fold_transposes, fuse_matmul
from .fuse_squeeze_excite import fuse_squeeze_excite
from .fuse_norm_matmul import fuse_gemv_epilogue, fuse_layernorm_gemv
from .gemm_matmul import gemm_to_matmul
from .half_weights import widen_half_weights
from .identity import remove_identity
from .refine_shapes import refine_shapes
from .trivial_moves import remove_trivial_moves
from .qdq import fuse_qdq

log = logging.getLogger(__name__)

PIPELINE: list[Callable[[Graph], Graph]] = [
    remove_identity,
    fuse_qdq,  # before fold_constants, which would turn the weights' DequantizeLinear into floats
    fold_constants,
    widen_half_weights,  # a float16 model's conv weights as float32 constants (the kernels' weights)
    refine_shapes,  # the dims folding made known (masks, reshape targets): static shapes for the fusions
    remove_trivial_moves,
    fold_gather_add,  # a decode step's token row + its constant position row: one Gather of the summed table
    remove_dead_nodes,
    fuse_rotary,  # before the Muls / Add / Neg of a rotary embedding join elementwise chains or epilogues
    fold_batchnorm,
    fold_channel_scale,  # a layer scale (gamma * conv) into the conv's weights, before fuse_conv takes the residual
    fuse_conv,
    fuse_channel_shuffle,  # ShuffleNet's Concat -> Reshape -> Transpose -> Reshape (-> halves): one launch
    fuse_squeeze_excite,  # after fuse_conv: an SE block's mean and its two FusedConvs, one launch
    gemm_to_matmul,  # before fuse_matmul, which fuses the bias, residual and activation
    fuse_matmul,
    fold_transposes,
    fuse_attention,  # after the scores' FusedMatMul (mask, scale, transposed views) exists
    fuse_softmax,  # a mask the scores' FusedMatMul did not take: Add + Softmax as one launch
    fuse_layernorm,
    fuse_channel_norm,  # after fuse_layernorm: Transpose -> LayerNorm -> Transpose back, one launch
    fuse_elementwise,
    fuse_layernorm_gemv,  # last two: the FusedMatMuls they extend are final
    fuse_gemv_epilogue,
    remove_dead_nodes,
]


def optimize(graph: Graph, enabled: bool = True) -> Graph:
    """Run the pipeline (only the semantics-preserving cleanups when `enabled` is False)."""
    passes = PIPELINE if enabled else [fold_constants, widen_half_weights, remove_dead_nodes]
    for p in passes:
        before = len(graph.nodes)
        graph = p(graph)
        log.debug("pass %s: %d -> %d nodes", p.__name__, before, len(graph.nodes))
    return graph
