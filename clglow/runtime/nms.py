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


def _overlapping(c: tuple, i: int, rest: np.ndarray, iou_threshold: np.floating) -> np.ndarray:
    """Which boxes of `rest` overlap box i by more than the threshold (onnx.reference's tests)."""
    x0, x1, y0, y1 = c
    ix0, ix1 = np.maximum(x0[i], x0[rest]), np.minimum(x1[i], x1[rest])
    iy0, iy1 = np.maximum(y0[i], y0[rest]), np.minimum(y1[i], y1[rest])
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_i = (x1[i] - x0[i]) * (y1[i] - y0[i])
    area_r = (x1[rest] - x0[rest]) * (y1[rest] - y0[rest])
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
    each class's boxes apart: tens of thousands of candidates, few neighbours each)."""
    idx = np.arange(scores.shape[0])
    if score_threshold is not None:
        idx = idx[scores > score_threshold]
    if idx.size == 0 or limit == 0:
        return []
    order = idx[np.lexsort((idx, -scores[idx]))]  # score descending, then box index ascending
    x0, x1 = c[0], c[1]
    by_x = idx[np.argsort(x0[idx], kind="stable")]
    sorted_x0 = x0[by_x]
    spans = x1[idx] - x0[idx]
    widest = max(float(np.nanmax(spans)), 0.0) if np.isfinite(spans).any() else np.inf
    alive = np.ones(scores.shape[0], dtype=bool)
    kept: list = []
    for best in order.tolist():
        if not alive[best]:
            continue
        kept.append(best)
        if len(kept) == limit:
            break
        lo = np.searchsorted(sorted_x0, x0[best] - 2 * widest, "left") if np.isfinite(widest) else 0
        near = by_x[lo:np.searchsorted(sorted_x0, x1[best], "left")]
        near = near[alive[near]]
        if near.size:
            alive[near[_overlapping(c, best, near, iou_threshold)]] = False
    return kept


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
    rows: list = []
    for b in range(boxes.shape[0]):
        c = _corners(boxes[b], int(center_point_box or 0))
        for k in range(scores.shape[1]):
            rows.extend((b, k, i) for i in _select(c, scores[b, k], limit, iou, thr))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)
