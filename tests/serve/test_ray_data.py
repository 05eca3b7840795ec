"""Ray Data: a generated dataset of a few hundred rows scored with clglow.ray.Predictor equals
the direct InferenceSession's outputs (and onnxruntime's), for a fixed-batch ResNet-style model
(run row by row) and a symbolic-batch BERT-style one (run a batch at a time)."""
from __future__ import annotations

import numpy as np
import pytest
from serve_helpers import close

import clglow

ROWS = 300


def _score(ray, rows: list, model_path: str, batch_size: int):
    from clglow.ray import Predictor

    ds = ray.data.from_items(rows)
    out = ds.map_batches(Predictor,
                         fn_constructor_kwargs={"model": model_path, "keep_columns": True},
                         batch_size=batch_size, concurrency=2, num_cpus=0.25, batch_format="numpy")
    return sorted(out.take_all(), key=lambda r: int(r["id"]))


@pytest.mark.parametrize("name", ["resnet_fixed", "bert_dyn"])
def test_predictor_scores_a_dataset_like_the_direct_session(ray_session, served_models, name):
    pytest.importorskip("ray.data")
    m = served_models[name]
    big = m.make(7, ROWS)
    rows = [{"id": i, **{k: v[i] for k, v in big.items()}} for i in range(ROWS)]
    scored = _score(ray_session, rows, m.path, batch_size=32)
    assert [int(r["id"]) for r in scored] == list(range(ROWS))
    sess = clglow.InferenceSession(m.path)
    out_name = sess.get_outputs()[0].name
    got = np.stack([r[out_name] for r in scored])
    step = 1 if name == "resnet_fixed" else 50  # batch fixed at 1: row by row
    pieces = [{k: v[i:i + step] for k, v in big.items()} for i in range(0, ROWS, step)]
    want = np.concatenate([sess.run(None, p)[0] for p in pieces])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
    assert close(got, np.concatenate([m.reference(p)[out_name] for p in pieces]))  # onnxruntime


def test_predictor_names_a_missing_column(served_models):
    from clglow.errors import InvalidArgument
    from clglow.ray import Predictor

    pred = Predictor(served_models["bert_dyn"].path)
    with pytest.raises(InvalidArgument, match="'attention_mask'.*no column"):
        pred({"input_ids": np.zeros((2, 4), np.int64)})
