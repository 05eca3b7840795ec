"""The GPU check: clglow on a GPU's OpenCL driver side by side with PyTorch on CUDA.

    python -m benchmarks.gpu_check [--repeat R] [--batches 1,8] [--gemm 4096] [--json OUT]

Run by benchmarks/gpu_check.sh on a machine with a GPU (it registers the vendor's OpenCL ICD
and carries the wheels first). Prints, and writes as JSON with --json:

- the selected OpenCL device (CLGLOW_DEVICE, default the first GPU) and its Target profile;
- ResNet-50 batch 1 and 8: clglow fp32 (and fp16 when this build has a ``precision`` session
  option) against PyTorch eager on CUDA in fp32 with TF32 off and in fp16; latency medians,
  throughput (images/s) and ratios. The network is torchvision's resnet50 (random weights)
  exported to ONNX, so both sides run the same weights and clglow's output is checked
  against PyTorch's; where the export fails, clglow runs its own ResNet-50 builder (same
  architecture) and the check is skipped;
- SGEMM N^3: clglow's kernel time from OpenCL profiling events against torch.matmul (cuBLAS),
  fp32 with TF32 off, and fp16 for both where available.

Nothing here guesses a figure: a side that cannot run prints why and gets no ratio.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from typing import Callable, Optional, Sequence

import numpy as np

from . import models as M
from .runner import device_name


def _median_s(fn: Callable[[], object], repeat: int, warmup: int, sync: Callable[[], None]) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _torch():
    try:
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            return torch
        print("PyTorch: CUDA not available", file=sys.stderr)
    except ImportError as e:
        print(f"PyTorch: not importable ({e})", file=sys.stderr)
    return None


def _session(model, precision: Optional[str] = None, profiling: bool = False):
    """A clglow session; None (with the reason printed) where this build lacks `precision`."""
    import clglow

    fields = {f.name for f in dataclasses.fields(clglow.SessionOptions)}
    kw = {"enable_profiling": profiling}
    if precision is not None:
        if "precision" not in fields:
            print(f"clglow {precision}: this build has no `precision` session option", file=sys.stderr)
            return None
        kw["precision"] = precision
    return clglow.InferenceSession(model, clglow.SessionOptions(**kw))


def _resnet_pair(torch, batch: int):
    """(onnx model, torch module or None, checked): torchvision's resnet50 exported, else our builder."""
    if torch is not None:
        try:
            import io

            import onnx
            import torchvision

            net = torchvision.models.resnet50(weights=None).eval()
            buf = io.BytesIO()
            x = torch.randn(batch, 3, 224, 224)
            torch.onnx.export(net, (x,), buf, opset_version=17, dynamo=False,
                              input_names=["input"], output_names=["logits"])
            return onnx.load_from_string(buf.getvalue()), net, True
        except Exception as e:  # torchvision missing or the exporter failed: time it anyway
            print(f"torchvision export failed ({e}); clglow runs its own ResNet-50", file=sys.stderr)
            try:
                import torchvision

                return M.load("resnet50", batch)[0], torchvision.models.resnet50(weights=None).eval(), False
            except Exception:
                pass
    return M.load("resnet50", batch)[0], None, False


def _clglow_resnet(model, x: np.ndarray, precision: Optional[str], repeat: int) -> Optional[dict]:
    sess = _session(model, precision)
    if sess is None:
        return None
    name = sess.get_inputs()[0].name
    out = sess.run(None, {name: x})[0]
    t = _median_s(lambda: sess.run(None, {name: x}), repeat, 3, lambda: None)
    info = {"ms": t * 1e3, "device": device_name(sess), "output": out}
    sess.release()
    return info


def _torch_resnet(torch, net, x: np.ndarray, half: bool, repeat: int) -> dict:
    dev = torch.device("cuda")
    net = net.to(dev).half() if half else net.to(dev).float()
    xt = torch.from_numpy(x).to(dev)
    xt = xt.half() if half else xt
    with torch.inference_mode():
        out = net(xt).float().cpu().numpy()
        t = _median_s(lambda: net(xt), repeat, 5, torch.cuda.synchronize)
    net.float().cpu()
    return {"ms": t * 1e3, "output": out}


def resnet(torch, batch: int, repeat: int) -> dict:
    model, net, checked = _resnet_pair(torch, batch)
    x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224), dtype=np.float32)
    row: dict = {"batch": batch}
    for prec in (None, "fp16"):
        r = _clglow_resnet(model, x, prec, repeat)
        if r is not None:
            row[f"clglow_{prec or 'fp32'}"] = r
    if torch is not None and net is not None:
        row["torch_fp32"] = _torch_resnet(torch, net, x, False, repeat)
        row["torch_fp16"] = _torch_resnet(torch, net, x, True, repeat)
        if checked and "clglow_fp32" in row:
            ref = row["torch_fp32"]["output"]
            for key in ("clglow_fp32", "clglow_fp16"):
                if key in row:
                    got = row[key]["output"]
                    row[key]["max_rel_err"] = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
                    row[key]["top1_agree"] = float(np.mean(got.argmax(1) == ref.argmax(1)))
    for v in row.values():
        if isinstance(v, dict):
            v.pop("output", None)
    return row


def _clglow_gemm_ms(n: int, precision: Optional[str], repeat: int) -> Optional[float]:
    """Median summed kernel time of one N^3 MatMul run, from OpenCL profiling events."""
    from clglow.runtime.profiler import kernel_times

    rng = np.random.default_rng(n)
    feeds = {"A": rng.standard_normal((n, n), dtype=np.float32), "B": rng.standard_normal((n, n), dtype=np.float32)}
    sess = _session(M.matmul_model(n, n, n), precision, profiling=True)
    if sess is None:
        return None
    sess.run(None, feeds)
    sess._engine.records.clear()
    for _ in range(repeat):
        sess.run(None, feeds)
    per_run = [sum(e - s for _, _, _, s, e in kernel_times([rec])) / 1e6 for rec in sess._engine.records]
    sess.release()
    return statistics.median(per_run) if per_run else None


def _torch_gemm_ms(torch, n: int, half: bool, repeat: int) -> float:
    dt = torch.float16 if half else torch.float32
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    return _median_s(lambda: a @ b, repeat, 3, torch.cuda.synchronize) * 1e3


def gemm(torch, n: int, repeat: int) -> dict:
    flops = 2.0 * n ** 3
    row: dict = {"n": n}
    for prec, key in ((None, "clglow_fp32"), ("fp16", "clglow_fp16")):
        ms = _clglow_gemm_ms(n, prec, repeat)
        if ms is not None:
            row[key] = {"ms": ms, "tflops": flops / ms / 1e9}
    if torch is not None:
        for half, key in ((False, "torch_fp32"), (True, "torch_fp16")):
            ms = _torch_gemm_ms(torch, n, half, repeat)
            row[key] = {"ms": ms, "tflops": flops / ms / 1e9}
    return row


def _ratio(row: dict, ours: str, theirs: str) -> str:
    if ours in row and theirs in row:
        return f"{row[theirs]['ms'] / row[ours]['ms']:.2f}x"
    return "n/a"


def report(rows_resnet: list, rows_gemm: list) -> str:
    lines = ["| ResNet-50 | clglow fp32 ms | clglow fp16 ms | torch fp32 ms | torch fp16 ms | "
             "clglow/torch throughput fp32 | fp16 | clglow fp16 speed-up |", "|---|---|---|---|---|---|---|---|"]
    for r in rows_resnet:
        cells = [f"{r[k]['ms']:.2f}" if k in r else "n/a" for k in ("clglow_fp32", "clglow_fp16", "torch_fp32", "torch_fp16")]
        lines.append(f"| b{r['batch']} | " + " | ".join(cells) + f" | {_ratio(r, 'clglow_fp32', 'torch_fp32')} | "
                     f"{_ratio(r, 'clglow_fp16', 'torch_fp16')} | {_ratio(r, 'clglow_fp16', 'clglow_fp32')} |")
    lines += ["", "| SGEMM | clglow fp32 TFLOP/s | torch fp32 (TF32 off) | clglow/cuBLAS fp32 | clglow fp16 | torch fp16 |",
              "|---|---|---|---|---|---|"]
    for r in rows_gemm:
        cells = [f"{r[k]['tflops']:.1f}" if k in r else "n/a" for k in ("clglow_fp32", "torch_fp32")]
        half = [f"{r[k]['tflops']:.1f}" if k in r else "n/a" for k in ("clglow_fp16", "torch_fp16")]
        lines.append(f"| {r['n']}^3 | {cells[0]} | {cells[1]} | {_ratio(r, 'clglow_fp32', 'torch_fp32')} | "
                     f"{half[0]} | {half[1]} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--gemm", type=int, nargs="*", default=[4096])
    ap.add_argument("--json", help="write the figures here as JSON")
    args = ap.parse_args(argv)
    torch = _torch()
    rows_resnet = [resnet(torch, int(b), args.repeat) for b in args.batches.split(",") if b]
    rows_gemm = [gemm(torch, n, args.repeat) for n in args.gemm]
    print(report(rows_resnet, rows_gemm))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"resnet50": rows_resnet, "sgemm": rows_gemm}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
