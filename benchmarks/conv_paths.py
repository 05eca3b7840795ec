"""One conv shape under each of its conv paths: kernel times per launch from OpenCL profiling
events, the paths in turns, ratios per turn against the first.

    python -m benchmarks.conv_paths H W OH OW KH KW SH SW PH PW CIN COUT [--images N]
        [--paths implicit,"transposed rows",...] [--rounds R] [--act Relu]

The conv is a one-node model (bias, the activation; random weights), each path an engine whose
tuning table holds that path for the shape (what `clglow tune` stores), so each path runs as it
would in a model whose database chose it, with its own copy of X (no producer writes its padded
input). Default paths: every path of the conv family's space for the shape. On a busy machine
read the ratios per turn (median and quartiles), not the times across runs.

Example (ResNet-50's 56 -> 28 3x3/2, 128 channels; CLGLOW_DEVICE selects the device)::

    python -m benchmarks.conv_paths 56 56 28 28 3 3 2 2 1 1 128 128
"""
from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np


def _key(args: argparse.Namespace) -> tuple:
    """The conv family's shape key (lower/conv.py conv_key) of the command line's conv."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, cin, cout = args.geometry
    return (h, w, oh, ow, kh, kw, sh, sw, ph, pw, 1, 1, args.images, cin, cout, 1, args.act, True, False)


def _engine(device, target, key: tuple, path: str, model):
    """An engine running `model` with `path` as the tuning table's choice for `key`."""
    from clglow.config import PlanOptions
    from clglow.frontend.onnx_model import import_model
    from clglow.lower.tunable import key_str, params_items
    from clglow.passes.pipeline import optimize
    from clglow.runtime.device import Device
    from clglow.runtime.engine import Engine

    dev = Device(device.context, device.cl_device)
    dev.cache = device.cache
    dev.tuning.set_table(target.family, (("conv", key_str(key), params_items({"path": path, "variant": ""})),))
    return Engine(optimize(import_model(model)), dev, PlanOptions.from_env(target=target.family, zero_copy=False),
                  profiling=True)


def _split(engine, feeds: dict) -> Dict[str, float]:
    """{kernel name: ms} of one run, and "total"."""
    from clglow.runtime.profiler import kernel_times

    engine.records.clear()
    engine.run(feeds)
    out: Dict[str, float] = {}
    for _label, kernel, _op, start, end in kernel_times(engine.records):
        out[kernel] = out.get(kernel, 0.0) + (end - start) * 1e-6
    out["total"] = sum(out.values())
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.conv_paths", description=__doc__.split("\n\n")[0])
    p.add_argument("geometry", type=int, nargs=12, metavar="N", help="H W OH OW KH KW SH SW PH PW CIN COUT")
    p.add_argument("--images", type=int, default=1)
    p.add_argument("--paths", help="comma-separated conv paths (default: the conv family's space)")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--act", default="Relu")
    args = p.parse_args(argv)

    from onnx.reference import ReferenceEvaluator

    from clglow.config import target_family
    from clglow.lower.conv import conv_space
    from clglow.runtime.device import select_device
    from clglow.runtime.node_bench import conv_model

    device = select_device()
    target = device.target(target_family())  # CLGLOW_TARGET's family, else the device's own
    key = _key(args)
    paths: List[str] = (args.paths.split(",") if args.paths
                        else [str(pt["path"]) for pt in conv_space(target, key) if not pt.get("variant")])
    model = conv_model(key)
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    engines = {path: _engine(device, target, key, path, model) for path in paths}
    for path, e in engines.items():
        got = e.run(feeds)["Y"]
        err = float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))
        print(f"{path}: launches {list(_split(e, feeds))[:-1]}, max rel. diff vs onnx.reference {err:.1e}")
    times: Dict[str, List[Dict[str, float]]] = {path: [] for path in paths}
    for _ in range(args.rounds):
        for path, e in engines.items():
            times[path].append(_split(e, feeds))
    first = np.array([t["total"] for t in times[paths[0]]])
    for path in paths:
        total = np.array([t["total"] for t in times[path]])
        r = first / total
        parts = ", ".join(f"{k} {np.median([t[k] for t in times[path]]):.3f}" for k in times[path][0] if k != "total")
        print(f"{path:18s} median {np.median(total):.3f} ms ({parts}); {paths[0]}/this x{np.median(r):.3f} "
              f"[{np.percentile(r, 25):.3f}-{np.percentile(r, 75):.3f}]")
    for e in engines.values():
        e.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
