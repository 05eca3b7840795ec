"""Buffer planning by liveness: intermediate tensors share a few device buffers.

Each tensor is live from the step that writes it to the last step that reads it
(or to the end for graph outputs). Tensors whose lifetimes do not overlap reuse
the same buffer (best fit), so peak device memory is close to the largest set
of simultaneously live activations, and allocation happens once per plan.

Pure functions over `Interval`s: runtime.planning computes the lifetimes and calls
`plan_offsets` (one arena) or, when the arena would exceed the device's largest
allocation, `assign_buffers` (whole buffers); runtime.binding allocates the result.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Interval:
    """A buffer live from step `start` to step `end` (both included), `nbytes` large."""

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


def plan_offsets(intervals: list[Interval], align: int = 256) -> tuple[dict[str, tuple[int, int]], int]:
    """Place every tensor at an offset in one arena: tensors whose lifetimes overlap never share
    bytes. Greedy by size (largest first, lowest free offset; TFLite's arena planner does the
    same): the arena comes out close to the largest set of simultaneously live tensors, where
    whole-buffer reuse (assign_buffers) wastes the difference between a slot's tenants.
    Returns ({name: (offset, size)}, arena bytes); sizes are rounded up to `align`."""
    def need(iv: Interval) -> int:
        return max(align, (iv.nbytes + align - 1) // align * align)

    placed: list[tuple[int, int, int, int]] = []  # (offset, size, start, end)
    result: dict[str, tuple[int, int]] = {}
    for iv in sorted(intervals, key=lambda iv: (-need(iv), iv.start, iv.name)):
        size = need(iv)
        busy = sorted((o, s) for o, s, st, en in placed if not (en < iv.start or iv.end < st))
        off = 0
        for o, s in busy:
            if off + size <= o:
                break
            off = max(off, o + s)
        placed.append((off, size, iv.start, iv.end))
        result[iv.name] = (off, size)
    total = max((o + s for o, s, _, _ in placed), default=0)
    return result, max(total, align)
