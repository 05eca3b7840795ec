"""Buffer planning by liveness: intermediate tensors share a few device buffers.

Each tensor is live from the step that writes it to the last step that reads it
(or to the end for graph outputs). Tensors whose lifetimes do not overlap reuse
the same buffer (best fit), so peak device memory is close to the largest set
of simultaneously live activations, and allocation happens once per plan.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Interval:
    name: str
    nbytes: int
    start: int
    end: int


def assign_buffers(intervals: list[Interval], align: int = 256) -> tuple[dict[str, int], list[int]]:
    """Map tensor -> buffer slot; returns (assignment, slot sizes in bytes)."""
    order = sorted(intervals, key=lambda iv: (iv.start, -iv.nbytes))
    slot_sizes: list[int] = []
    slot_free_at: list[int] = []  # step after which a slot is free again
    assignment: dict[str, int] = {}
    for iv in order:
        need = max(align, (iv.nbytes + align - 1) // align * align)
        best = -1
        for s, (size, free_at) in enumerate(zip(slot_sizes, slot_free_at)):
            if free_at < iv.start and size >= need and (best < 0 or size < slot_sizes[best]):
                best = s
        if best < 0:  # grow the largest free slot rather than adding a new one
            for s, free_at in enumerate(slot_free_at):
                if free_at < iv.start and (best < 0 or slot_sizes[s] > slot_sizes[best]):
                    best = s
            if best >= 0:
                slot_sizes[best] = need
        if best < 0:
            slot_sizes.append(need)
            slot_free_at.append(-1)
            best = len(slot_sizes) - 1
        slot_free_at[best] = iv.end
        assignment[iv.name] = best
    return assignment, slot_sizes
