"""NonMaxSuppression on the host, vectorised with numpy.

onnx.reference's NonMaxSuppression compares boxes pair by pair in Python: a detection model with
random weights (every anchor above the score threshold) spent minutes per run in it (torchvision's
ssdlite320: thousands of boxes per class). This is the same greedy algorithm with one numpy pass
per selected box, and the same float32 arithmetic and comparisons, so it selects the same boxes in
the same order: per batch and class, candidates above score_threshold by score descending (ties:
lower box index first); a candidate is kept unless its IoU with a kept box exceeds
iou_threshold; at most max_output_boxes_per_class per class.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


def _corners(boxes: np.ndarray, center_point_box: int) -> tuple:
    """(x_min, x_max, y_min, y_max) per box, as onnx.reference derives them."""
    if center_point_box == 0:  # [y1, x1, y2, x2], corners in either order
        return (np.minimum(boxes[:, 1], boxes[:, 3]), np.maximum(boxes[:, 1], boxes[:, 3]),
                np.minimum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 0], boxes[:, 2]))
    half_w, half_h = boxes[:, 2] / boxes.dtype.type(2), boxes[:, 3] / boxes.dtype.type(2)
    return boxes[:, 0] - half_w, boxes[:, 0] + half_w, boxes[:, 1] - half_h, boxes[:, 1] + half_h


def _overlapping(c: tuple, i: int, lo: int, hi: int, iou_threshold: np.floating) -> np.ndarray:
    """Which boxes of the slice lo:hi (of arrays sorted by x_min) overlap box i of them by more
    than the threshold (onnx.reference's tests, in its float arithmetic)."""
    x0, x1, y0, y1, area = c
    ix0, ix1 = np.maximum(x0[i], x0[lo:hi]), np.minimum(x1[i], x1[lo:hi])
    iy0, iy1 = np.maximum(y0[i], y0[lo:hi]), np.minimum(y1[i], y1[lo:hi])
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_i, area_r = area[i], area[lo:hi]
    union = area_i + area_r - inter
    valid = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area_i > 0) & (area_r > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / np.where(valid, union, 1)
    return valid & (iou > iou_threshold)


def _select(c: tuple, scores: np.ndarray, limit: int, iou_threshold: np.floating,
            score_threshold: Optional[np.floating]) -> list:
    """Greedy selection. Only boxes whose x extent meets the kept box's can be suppressed by it:
    with the candidates sorted by x_min, those lie in one slice (x_min in (x0 - widest, x1)), so
    each kept box tests a neighbourhood, not every candidate (torchvision's batched NMS offsets
    each class's boxes apart: tens of thousands of candidates, few neighbours each). The
    candidates' corners and areas are laid out in x order once and every slice's bounds found
    in one search, so a kept box costs a few numpy calls on views (ssdlite320: 11k kept boxes)."""
    idx = np.arange(scores.shape[0])
    if score_threshold is not None:
        idx = idx[scores > score_threshold]
    if idx.size == 0 or limit == 0:
        return []
    order = idx[np.lexsort((idx, -scores[idx]))]  # score descending, then box index ascending
    x0, x1, y0, y1 = c
    by_x = idx[np.argsort(x0[idx], kind="stable")]
    sx = tuple(a[by_x] for a in (x0, x1, y0, y1))
    sx = sx + ((sx[1] - sx[0]) * (sx[3] - sx[2]),)
    spans = x1[idx] - x0[idx]
    widest = max(float(np.nanmax(spans)), 0.0) if np.isfinite(spans).any() else np.inf
    place = np.empty(scores.shape[0], dtype=np.int64)
    place[by_x] = np.arange(by_x.size)
    his = np.searchsorted(sx[0], x1[order], "left").tolist()
    los = np.searchsorted(sx[0], x0[order] - 2 * widest, "left").tolist() if np.isfinite(widest) else [0] * order.size
    alive = np.ones(by_x.size, dtype=bool)
    kept: list = []
    pairs = _overlap_lists(sx, place[order], np.array(los), np.array(his), iou_threshold)
    if pairs is not None:  # each kept box's suppressions found up front, in bulk
        start, cols = pairs
        bounds = start.tolist()
        live = alive.tolist()  # a list: the loop's reads and writes stay in Python
        hits = cols.tolist()
        for k, (best, pos) in enumerate(zip(order.tolist(), place[order].tolist())):
            if not live[pos]:
                continue
            kept.append(best)
            if len(kept) == limit:
                break
            for j in hits[bounds[k]:bounds[k + 1]]:
                live[j] = False
        return kept
    for best, pos, lo, hi in zip(order.tolist(), place[order].tolist(), los, his):
        if not alive[pos]:
            continue
        kept.append(best)
        if len(kept) == limit:
            break
        if hi > lo:
            alive[lo:hi] &= ~_overlapping(sx, pos, lo, hi, iou_threshold)
    return kept


PAIR_BUDGET = 1 << 24  # neighbour pairs tested up front at most; beyond, box by box in the loop
# ... and at most this many per candidate: a pair up front costs about a 200th of a kept box's
# numpy calls in the loop (ssdlite320's NMS: 667 pairs a box, 4.7 s up front vs 1.6 s in the loop)
PAIRS_PER_BOX = 128
_PAIR_BLOCK = 1 << 20  # pairs tested per numpy pass (bounds the temporaries)


def _overlap_lists(sx: tuple, pos: np.ndarray, los: np.ndarray, his: np.ndarray,
                   iou_threshold: np.floating) -> Optional[tuple]:
    """For every candidate k (in score order, at x-sorted place pos[k]), the x-sorted places of
    the boxes its neighbourhood slice los[k]:his[k] holds that it overlaps beyond the threshold:
    (start [K + 1], places) in CSR form, the same float tests as _overlapping; None when the
    slices hold more than PAIR_BUDGET pairs, or PAIRS_PER_BOX a candidate (wide boxes). Why: the greedy loop then only
    marks precomputed places per kept box (ssdlite320: 11k kept boxes of 27k candidates)."""
    sizes = np.maximum(his - los, 0)
    total = int(sizes.sum())
    if total > min(PAIR_BUDGET, PAIRS_PER_BOX * pos.size):
        return None
    x0, x1, y0, y1, area = sx
    found, counts = [], np.zeros(pos.size, dtype=np.int64)
    ends = np.cumsum(sizes)
    k0 = 0
    while k0 < pos.size:
        k1 = int(np.searchsorted(ends, (ends[k0 - 1] if k0 else 0) + _PAIR_BLOCK, "right"))
        k1 = max(k1, k0 + 1)
        sz = sizes[k0:k1]
        rows = np.repeat(np.arange(k0, k1), sz)
        first = np.cumsum(sz) - sz
        cols = np.arange(int(sz.sum())) - np.repeat(first, sz) + np.repeat(los[k0:k1], sz)
        i = pos[rows]
        ix0, ix1 = np.maximum(x0[i], x0[cols]), np.minimum(x1[i], x1[cols])
        iy0, iy1 = np.maximum(y0[i], y0[cols]), np.minimum(y1[i], y1[cols])
        inter = (ix1 - ix0) * (iy1 - iy0)
        area_i, area_r = area[i], area[cols]
        union = area_i + area_r - inter
        valid = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area_i > 0) & (area_r > 0) & (union > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            hit = valid & (inter / np.where(valid, union, 1) > iou_threshold)
        found.append(cols[hit])
        counts[k0:k1] = np.bincount(rows[hit] - k0, minlength=k1 - k0)
        k0 = k1
    start = np.zeros(pos.size + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    return start, (np.concatenate(found) if found else np.zeros(0, np.int64))


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_output_boxes_per_class=None,
                        iou_threshold=None, score_threshold=None, center_point_box: int = 0) -> np.ndarray:
    """selected_indices [num_selected, 3] (batch, class, box) as ONNX NonMaxSuppression defines."""
    limit = 0
    if max_output_boxes_per_class is not None and np.size(max_output_boxes_per_class):
        limit = max(int(np.asarray(max_output_boxes_per_class).reshape(-1)[0]), 0)
    iou = scores.dtype.type(np.asarray(iou_threshold).reshape(-1)[0]) if (
        iou_threshold is not None and np.size(iou_threshold)) else scores.dtype.type(0)
    thr = scores.dtype.type(np.asarray(score_threshold).reshape(-1)[0]) if (
        score_threshold is not None and np.size(score_threshold)) else None
    parts: list = [np.zeros((0, 3), dtype=np.int64)]
    for b in range(boxes.shape[0]):
        c = _corners(boxes[b], int(center_point_box or 0))
        for k in range(scores.shape[1]):
            kept = _select(c, scores[b, k], limit, iou, thr)
            rows = np.empty((len(kept), 3), dtype=np.int64)  # built as one array: ssdlite320 keeps 11k
            rows[:, 0], rows[:, 1], rows[:, 2] = b, k, kept
            parts.append(rows)
    return np.concatenate(parts)
