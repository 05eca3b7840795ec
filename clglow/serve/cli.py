"""`clglow serve MODEL...`: deploy models on Ray Serve behind the Open Inference Protocol.

Starts a local Ray instance (or joins a cluster with ``--address``), deploys every model (files,
``NAME=FILE`` pairs, or folders of .onnx files), prints the URL and serves until Ctrl-C or
SIGTERM, then shuts Serve (and the Ray it started) down.

    clglow serve model.onnx --port 8000 --max-batch-size 16 --batch-wait-ms 2
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional

from ..errors import InvalidArgument
from . import INSTALL_HINT


def model_paths(specs: list[str], name: Optional[str]) -> list[tuple[str, str]]:
    """(name, absolute path) of every model given: FILE, NAME=FILE, or a folder of .onnx files."""
    found: list[tuple[str, str]] = []
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = "", spec
        p = Path(path).expanduser().resolve()
        if p.is_dir():
            files = sorted(p.glob("*.onnx"))
            if not files:
                raise InvalidArgument(f"folder {str(p)!r} holds no .onnx file")
            found += [(f.stem, str(f)) for f in files]
        elif p.is_file():
            found.append((label or p.stem, str(p)))
        else:
            raise InvalidArgument(f"no model file or folder at {str(p)!r}")
    if name is not None:
        if len(found) != 1:
            raise InvalidArgument(f"--name names one model, but {len(found)} were given (use NAME=FILE for each)")
        found = [(name, found[0][1])]
    return found


def add_parser(sub: Any) -> None:
    """Register `clglow serve` on the CLI's subparsers."""
    sp = sub.add_parser("serve", help="serve models over the Open Inference Protocol (KServe v2) on Ray Serve")
    sp.add_argument("model", nargs="+", help=".onnx file, NAME=FILE, or a folder of .onnx files")
    sp.add_argument("--name", help="the model's name in URLs (one model; default: the file name)")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8000)
    sp.add_argument("--replicas", type=int, help="replicas (default: one per GPU/accelerator device, else 1)")
    sp.add_argument("--replica-cpus", type=float, default=0.5, help="Ray CPUs reserved per replica")
    sp.add_argument("--max-batch-size", type=int, default=32,
                    help="rows per dynamic batch (models with a symbolic first dim; 0 or 1: off)")
    sp.add_argument("--batch-wait-ms", type=float, default=5.0, help="longest wait to fill a batch")
    sp.add_argument("--max-body-bytes", type=int, default=64 << 20, help="largest request body accepted")
    sp.add_argument("--device", help="device selector for every replica (as CLGLOW_DEVICE)")
    sp.add_argument("--target", choices=["cpu", "gpu"], help="force a target family's kernels")
    sp.add_argument("--address", help="join this Ray cluster (default: start a local Ray instance)")
    sp.add_argument("--num-cpus", type=int, help="CPUs of the local Ray instance (default: all)")
    sp.set_defaults(fn=run_serve)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run_serve(args: argparse.Namespace) -> int:
    """Deploy, print the URL, serve until interrupted, shut down."""
    for opt in ("replicas", "port"):
        value = getattr(args, opt)
        if value is not None and value < 1:
            raise InvalidArgument(f"--{opt} must be at least 1, got {value}")
    models = model_paths(args.model, args.name)
    from ..frontend.onnx_model import load_model

    for _, path in models:  # a file that is not a model fails here, named, not in every replica
        load_model(path)
    try:
        import ray

        from .app import ModelSpec, ServeConfig, start, stop
    except ImportError as e:
        print(f"error: {e}\n(install the serving extra: {INSTALL_HINT})", file=sys.stderr)
        return 2
    config = ServeConfig(
        models=tuple(ModelSpec(n, p, max_batch_size=args.max_batch_size, batch_wait_ms=args.batch_wait_ms,
                               target=args.target) for n, p in models),
        replicas=args.replicas, num_cpus=args.replica_cpus, device=args.device, max_body_bytes=args.max_body_bytes)
    own_ray = not ray.is_initialized() and not args.address
    try:
        url = start(config, host=args.host, port=args.port, address=args.address, num_cpus=args.num_cpus)
        for sig in (signal.SIGTERM, signal.SIGINT):  # after ray.init, which installs its own; SIGINT
            signal.signal(sig, _raise_interrupt)  # too, as a background job may have it ignored
        for n, _ in models:
            print(f"serving {n!r}: {url}/v2/models/{n} (infer: POST {url}/v2/models/{n}/infer)", flush=True)
        print(f"ready at {url} (pid {os.getpid()}); Ctrl-C stops", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("shutting down ...", flush=True)
    except RuntimeError as e:  # Serve's "Deploying application clglow failed" (the replica's error is logged above)
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    finally:
        stop(own_ray)
    return 0
