"""The CPU family's streamed recurrent weight (recurrent.cl R_T 2: a constant R packed per
work-item's block of units, the k loop in KSPLIT chains, KS) against onnx.reference: hidden
sizes of several vector blocks with a partial last one, odd hidden sizes (the chains' tail),
both directions, layouts, batch rows sharing a work-group, initial states and peepholes."""
from __future__ import annotations

import pytest

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check
    from .test_recurrent import OUTS, case, node, split
except ImportError:  # pragma: no cover
    from run_launches import check  # type: ignore
    from test_recurrent import OUTS, case, node, split  # type: ignore

from clglow.lower import recurrent as rec
from clglow.target import Target


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("hidden,direction,layout", [(37, "forward", 0), (33, "bidirectional", 1),
                                                     (48, "reverse", 0), (1, "forward", 1)])
def test_streamed_r(op, hidden, direction, layout):
    names, feeds = case(op, seq=5, batch=4, inp=7, hidden=hidden, direction=direction, layout=layout,
                        states=True, peep=op == "LSTM")
    live, consts = split(feeds)
    check(node(op, names, OUTS[op], hidden_size=hidden, direction=direction, layout=layout), live, consts,
          opset=14, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("lbr", [0, 1])
def test_streamed_gru_many_batch_rows(lbr):
    """Batch rows beyond the compute units: several rows per work-group (BB > 1) over one R load."""
    names, feeds = case("GRU", seq=3, batch=40, inp=6, hidden=21, states=True)
    live, consts = split(feeds)
    check(node("GRU", names, ["Y", "Y_h"], hidden_size=21, linear_before_reset=lbr), live, consts, opset=14,
          rtol=1e-4, atol=1e-5)


def test_vectors_path_streams():
    """The CPU family's row of RECURRENT_PATHS streams R; the GPU family's keeps R^T rows."""
    cpu = rec.recurrent_path(rec.RecurrentCase(Target(family="cpu"), True, 64))
    gpu = rec.recurrent_path(rec.RecurrentCase(Target(family="gpu"), True, 64))
    assert cpu.stream and not gpu.stream
