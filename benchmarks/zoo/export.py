"""Zoo models as ONNX files in the cache: ``<clglow cache>/zoo/<name>/{model.onnx,inputs.npz,meta.json}``.

Exports run in a child process (``python -m benchmarks.zoo.export NAME ...``) so that torch is
never loaded into the process that times clglow and onnxruntime, and so that an exporter
crash costs one model. A model is exported again only when its files are missing, when its
last export failed under other torch/timm/transformers versions, or with ``--reexport``.
Writes are atomic (a temporary file, then ``os.replace``).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

log = logging.getLogger(__name__)

OPSET = 17
# bumped when the weights a builder exports change (weights.perturb): older exports are redone
WEIGHTS = 2


def zoo_dir() -> Path:
    """``<clglow cache root>/zoo`` (CLGLOW_CACHE_DIR, else platformdirs' user cache for clglow)."""
    from clglow.runtime.cache import default_cache_dir

    return default_cache_dir() / "zoo"


def model_dir(name: str) -> Path:
    return zoo_dir() / name


def read_meta(name: str) -> Optional[dict]:
    """The model's meta.json, or None when missing or unreadable (a torn write is re-exported)."""
    try:
        with open(model_dir(name) / "meta.json") as f:
            meta = json.load(f)
        return meta if isinstance(meta, dict) else None
    except (OSError, ValueError):
        return None


def versions() -> Dict[str, str]:
    """Versions of the export toolchain (read from package metadata: imports nothing)."""
    from importlib import metadata

    out = {}
    for pkg in ("torch", "timm", "transformers", "torchvision", "onnx"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def needs_export(name: str, force: bool = False) -> bool:
    """True when the model's files are missing, or its recorded failure came from other versions."""
    if force:
        return True
    meta = read_meta(name)
    if meta is None:
        return True
    if meta.get("weights") != WEIGHTS:
        return True
    if meta.get("ok"):
        return not (model_dir(name) / "model.onnx").exists() or not (model_dir(name) / "inputs.npz").exists()
    return meta.get("versions") != versions()


def export_one(name: str) -> dict:
    """Build `name`, export it and its seeded inputs into its cache folder; return its meta
    (``ok`` False with ``error`` when building or exporting fails)."""
    from .catalog import MODELS

    meta: dict = {"name": name, "versions": versions(), "opset": OPSET, "weights": WEIGHTS}
    t0 = time.perf_counter()
    try:
        meta.update(_export(name, MODELS[name].build))
        meta["ok"] = True
    except Exception as e:  # any exporter failure is a row of the table, not a crash
        meta["ok"] = False
        meta["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:400]
        meta["traceback"] = traceback.format_exc()[-4000:]
    meta["export_s"] = round(time.perf_counter() - t0, 2)
    _atomic_write(model_dir(name) / "meta.json", json.dumps(meta, indent=1).encode())
    return meta


def _export(name: str, build: Callable) -> dict:
    import io

    import numpy as np
    import onnx
    import torch

    from .weights import perturb

    built = build()
    perturb(built.module)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = built.module(*built.inputs)
        buf = io.BytesIO()
        torch.onnx.export(built.module, built.inputs, buf, dynamo=False, opset_version=built.opset,
                          input_names=built.input_names, output_names=built.output_names,
                          do_constant_folding=True)
    data = buf.getvalue()
    model = onnx.load_from_string(data)
    present = {i.name for i in model.graph.input}
    feeds = {n: t.numpy() for n, t in zip(built.input_names, built.inputs) if n in present}
    npz = io.BytesIO()
    np.savez(npz, **feeds)
    _atomic_write(model_dir(name) / "inputs.npz", npz.getvalue())
    _atomic_write(model_dir(name) / "model.onnx", data)
    n_out = len(expected) if isinstance(expected, (tuple, list)) else 1
    params = sum(p.numel() for p in built.module.parameters())
    ops = sorted({n.op_type for n in model.graph.node})
    return {"params": int(params), "nodes": len(model.graph.node), "onnx_mb": round(len(data) / 1e6, 2),
            "inputs": sorted(feeds), "dropped_inputs": sorted(set(built.input_names) - present),
            "torch_outputs": n_out, "ops": ops}


def ensure(names: Sequence[str], force: bool = False, timeout_s: float = 1800,
           say: Callable[[str], None] = log.info) -> Dict[str, dict]:
    """Export whatever of `names` needs it (one child process for all), then return every meta."""
    todo = [n for n in names if needs_export(n, force)]
    if todo:
        say(f"exporting {len(todo)} zoo model(s) into {zoo_dir()}: {', '.join(todo)}")
        cmd = [sys.executable, "-m", "benchmarks.zoo.export", *todo]
        repo = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            p = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout_s)
            for line in p.stdout.splitlines():
                if line.startswith("EXPORT "):
                    say("  " + line[len("EXPORT "):])
            if p.returncode != 0:
                say(f"export child exited with status {p.returncode}: {p.stderr.strip()[-600:]}")
        except subprocess.TimeoutExpired:
            say(f"export child ran past {timeout_s:.0f} s; models left unexported are listed as failed")
    out = {}
    for n in names:
        meta = read_meta(n)
        out[n] = meta if meta is not None else {"name": n, "ok": False, "error": "export did not finish"}
    return out


def main(argv: Optional[List[str]] = None) -> int:
    """Child entry point: export each named model, printing one ``EXPORT`` line per model."""
    names = list(sys.argv[1:] if argv is None else argv)
    for n in names:
        meta = export_one(n)
        status = "ok" if meta["ok"] else f"failed: {meta['error']}"
        print(f"EXPORT {n}: {status} ({meta['export_s']} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
