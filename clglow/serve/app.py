"""The Ray Serve application: InferenceSessions as replicas behind the Open Inference Protocol.

Each replica of `ClglowServer` loads every model of the `ServeConfig` once (one InferenceSession
each, all on the replica's OpenCL device) and answers KServe v2 REST through a FastAPI ingress.
A model whose inputs and outputs share a symbolic first dimension batches dynamically: its
requests wait in a `serve.batch` queue (per model, at most `max_batch_size` rows or
`batch_wait_ms`), run as one concatenated batch and are split back; other models run request by
request. Runs of one replica go through one thread (one in-order device queue per replica).

Replicas: by default one per dedicated OpenCL device (GPU, accelerator) of a node, each replica
on its own (the node-local rank picks it); where there is none, `replicas` replicas share the
default device (a CPU device's cores).

    url = start(ServeConfig(models=(ModelSpec("resnet", "/models/resnet.onnx"),)), port=8000)
"""

import asyncio
import concurrent.futures
import json
import logging
import os
import zlib
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np

try:
    import ray
    from fastapi import FastAPI, Request
    from ray import serve
    from starlette.responses import Response
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(f"clglow's serving needs Ray Serve ({e}); install it with: pip install \"clglow[serve]\"") from e

from .. import __version__
from ..errors import InvalidArgument
from ..session import InferenceSession, SessionOptions
from . import protocol
from .batching import batch_symbol, bucket, buckets, concat, group, pad, rows, split

log = logging.getLogger(__name__)

#: Device types a replica gets to itself; devices of other types (the host CPU) are shared.
DEDICATED_TYPES = ("gpu", "accelerator")
APP_NAME = "clglow"


@dataclass(frozen=True)
class ModelSpec:
    """One served model: its name in the URL, the ONNX file (a path every node can read, or the
    model's bytes), and its dynamic batching (`max_batch_size` rows; 0 or 1 turns it off)."""

    name: str
    model: Union[str, bytes]
    max_batch_size: int = 32
    batch_wait_ms: float = 5.0
    version: str = "1"
    target: Optional[str] = None  # SessionOptions.target


@dataclass(frozen=True)
class ServeConfig:
    """What the server runs: the models, the replicas and the request limits."""

    models: tuple[ModelSpec, ...]
    replicas: Optional[int] = None  # None: one per dedicated device, else 1
    num_cpus: float = 0.5  # Ray CPUs reserved per replica
    device: Optional[str] = None  # a CLGLOW_DEVICE selector for every replica (None: by rank)
    max_body_bytes: int = 64 << 20
    max_ongoing_requests: int = 128
    access_log: bool = False  # Serve's per-request log lines (a few ms of CPU per request on a small host)
    extra_actor_options: dict = field(default_factory=dict)


def dedicated_devices() -> list[str]:
    """Selectors of this node's devices that a replica gets to itself."""
    from ..runtime.device import list_devices

    try:
        return [d.selector for d in list_devices() if d.type in DEDICATED_TYPES]
    except Exception:  # noqa: BLE001 - no OpenCL on the driver: the replicas find out
        return []


def default_replicas() -> int:
    """One replica per dedicated device of the driver's node, else one."""
    return max(1, len(dedicated_devices()))


def replica_device(config: ServeConfig, local_rank: int) -> Optional[str]:
    """The device selector of the replica with this node-local rank (None: the default device)."""
    if config.device:
        return config.device
    devices = dedicated_devices()
    return devices[local_rank % len(devices)] if devices else None


def _warm_feeds(model_inputs: Sequence[Any], batch: int = 1) -> Optional[dict[str, np.ndarray]]:
    """Zeros for every input, the first dim at `batch` where symbolic and other symbolic dims at 1:
    a warm-up run builds the kernels and plan before the first request needs them."""
    feeds = {}
    for a in model_inputs:
        if a.dtype is None:
            return None
        dims = [d if isinstance(d, int) else (batch if i == 0 else 1) for i, d in enumerate(a.shape)]
        feeds[a.name] = np.zeros(dims, dtype=a.dtype)
    return feeds


class ServedModel:
    """One model in a replica: its session, its metadata and (when it batches) its batch queue."""

    def __init__(self, spec: ModelSpec, device: Optional[str], pool: concurrent.futures.Executor):
        self.spec, self.pool = spec, pool
        self.session = InferenceSession(spec.model, SessionOptions(target=spec.target), device=device)
        self.inputs, self.outputs = self.session.get_inputs(), self.session.get_outputs()
        self.output_names = [a.name for a in self.outputs]
        self.symbol = batch_symbol(self.inputs, self.outputs) if spec.max_batch_size > 1 else None
        self.metadata = protocol.model_metadata(spec.name, [spec.version], self.inputs, self.outputs)
        self._warm()
        self._batched = None
        if self.symbol is not None:
            self._batched = serve.batch(max_batch_size=spec.max_batch_size,
                                        batch_wait_timeout_s=spec.batch_wait_ms / 1000.0,
                                        batch_size_fn=lambda items: sum(rows(f) for f in items))(self._run_batch)

    def _warm(self) -> None:
        """Run once per batch size the model will see (each batching bucket), so the replica is
        ready only when its kernels are built."""
        for n in buckets(self.spec.max_batch_size) if self.symbol is not None else [1]:
            warm = _warm_feeds(self.inputs, n)
            if warm is None:
                return
            try:
                self.session.run(None, warm)
            except Exception as e:  # noqa: BLE001 - a model that needs real data warms on its first request
                log.warning("warm-up run of %s failed (%s); its first request builds its kernels", self.spec.name, e)
                return

    def _run(self, feeds: dict) -> dict[str, np.ndarray]:
        return dict(zip(self.output_names, self.session.run(None, feeds)))

    async def _run_in_pool(self, feeds: dict) -> dict[str, np.ndarray]:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._run, feeds)

    async def _run_batch(self, items: list) -> list:
        """serve.batch's function: compatible requests concatenated (padded to a bucket size), run,
        split back; a failed group's requests get its exception (the others their outputs)."""
        results: list = [None] * len(items)
        for idx in group(items, self.spec.max_batch_size):
            try:
                feeds, sizes = concat([items[i] for i in idx])
                total = sum(sizes)
                outs = await self._run_in_pool(pad(feeds, bucket(total, self.spec.max_batch_size)))
                parts = split({k: v[:total] for k, v in outs.items()}, sizes)
            except Exception as e:  # noqa: BLE001 - handed to each caller, who raises it
                parts = [e] * len(idx)
            for i, part in zip(idx, parts):
                results[i] = part
        return results

    async def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every output of the model for one request's (checked) inputs."""
        if self._batched is None or rows(feeds) > self.spec.max_batch_size:
            return await self._run_in_pool(feeds)
        out = await self._batched(feeds)
        if isinstance(out, Exception):
            raise out
        return out


def _json(doc: Any, status: int = 200) -> Response:
    return Response(json.dumps(doc).encode(), status_code=status, media_type="application/json")


def _error(message: str, status: int) -> Response:
    return Response(protocol.error_body(message), status_code=status, media_type="application/json")


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request body, refused (ProtocolError) as soon as it passes `max_bytes`, and inflated
    when it came with Content-Encoding gzip or deflate (the limit applies to both sizes)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit():
        protocol.check_body_size(int(declared), max_bytes)
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        protocol.check_body_size(total, max_bytes)
        chunks.append(chunk)
    body = b"".join(chunks)
    encoding = (request.headers.get("content-encoding") or "identity").lower()
    if encoding in ("gzip", "deflate"):
        inflater = zlib.decompressobj(zlib.MAX_WBITS | (16 if encoding == "gzip" else 0))
        try:
            body = inflater.decompress(body, max_bytes + 1 if max_bytes else 0)
        except zlib.error as e:
            raise protocol.ProtocolError(f"the {encoding} body cannot be inflated: {e}") from None
        protocol.check_body_size(len(body), max_bytes)
    elif encoding != "identity":
        raise protocol.ProtocolError(f"unsupported Content-Encoding {encoding!r} (gzip, deflate or none)")
    return body


ingress = FastAPI(title="clglow", description="Open Inference Protocol (KServe v2) for clglow")


@serve.deployment(name="ClglowServer")
@serve.ingress(ingress)
class ClglowServer:
    """A replica: every model of the config loaded once on the replica's device."""

    def __init__(self, config: ServeConfig):
        self.config = config
        ctx = serve.get_replica_context()
        rank = getattr(getattr(ctx, "rank", None), "local_rank", 0) or 0
        device = replica_device(config, int(rank))
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="clglow-serve")
        self.models = {spec.name: ServedModel(spec, device, self.pool) for spec in config.models}
        log.info("replica %s (pid %d) serves %s on %s", getattr(ctx, "replica_tag", "?"), os.getpid(),
                 sorted(self.models), device or "the default device")

    def _model(self, name: str, version: Optional[str] = None) -> ServedModel:
        model = self.models.get(name)
        if model is None:
            raise protocol.ProtocolError(f"unknown model {name!r}; this server has {sorted(self.models)}")
        if version not in (None, "", model.spec.version):
            raise protocol.ProtocolError(f"model {name!r} has no version {version!r} (it has {model.spec.version!r})")
        return model

    @ingress.get("/v2")
    def server_metadata(self) -> Response:
        return _json({"name": "clglow", "version": __version__, "extensions": ["binary_tensor_data"]})

    @ingress.get("/v2/health/live")
    def live(self) -> Response:
        return _json({"live": True})

    @ingress.get("/v2/health/ready")
    def ready(self) -> Response:
        return _json({"ready": True})

    @ingress.get("/v2/models/{name}")
    def metadata(self, name: str) -> Response:
        return self._metadata(name, None)

    @ingress.get("/v2/models/{name}/versions/{version}")
    def metadata_version(self, name: str, version: str) -> Response:
        return self._metadata(name, version)

    def _metadata(self, name: str, version: Optional[str]) -> Response:
        try:
            return _json(self._model(name, version).metadata)
        except protocol.ProtocolError as e:
            return _error(str(e), 400)

    @ingress.get("/v2/models/{name}/ready")
    def model_ready(self, name: str) -> Response:
        return self._model_ready(name, None)

    @ingress.get("/v2/models/{name}/versions/{version}/ready")
    def model_ready_version(self, name: str, version: str) -> Response:
        return self._model_ready(name, version)

    def _model_ready(self, name: str, version: Optional[str]) -> Response:
        try:
            self._model(name, version)
        except protocol.ProtocolError as e:
            return _error(str(e), 400)
        return _json({"name": name, "ready": True})

    @ingress.post("/v2/models/{name}/infer")
    async def infer(self, name: str, request: Request) -> Response:
        return await self._infer(name, None, request)

    @ingress.post("/v2/models/{name}/versions/{version}/infer")
    async def infer_version(self, name: str, version: str, request: Request) -> Response:
        return await self._infer(name, version, request)

    async def _infer(self, name: str, version: Optional[str], request: Request) -> Response:
        """Decode, check, run (batched or not), encode; 400 for what the client got wrong."""
        try:
            model = self._model(name, version)
            body = await read_body(request, self.config.max_body_bytes)
            req = protocol.decode_request(body, request.headers.get(protocol.HEADER_LENGTH), self.config.max_body_bytes)
            protocol.check_inputs(req.inputs, model.inputs)
            names = protocol.check_outputs(req.outputs, model.output_names)
            outs = await model.infer(req.inputs)
            content, headers = protocol.encode_response(name, model.spec.version, req.id,
                                                        {n: outs[n] for n in names}, req.binary_outputs(names))
        except InvalidArgument as e:  # ProtocolError, and the session's own checks
            return _error(str(e), 400)
        except Exception as e:  # noqa: BLE001 - an internal fault: logged here, 500 to the client
            log.exception("inference on model %r failed", name)
            return _error(f"internal error: {type(e).__name__}: {e}", 500)
        return Response(content, headers=headers)


def build_app(config: ServeConfig) -> Any:
    """The Serve application (bind it with serve.run, or let `start` do it)."""
    if not config.models:
        raise InvalidArgument("a server needs at least one model")
    names = [m.name for m in config.models]
    if len(set(names)) != len(names):
        raise InvalidArgument(f"two models have the same name: {names}")
    biggest = max([m.max_batch_size for m in config.models] + [1])
    options = {"num_cpus": config.num_cpus, **config.extra_actor_options}
    return ClglowServer.options(
        num_replicas=config.replicas or default_replicas(), ray_actor_options=options,
        max_ongoing_requests=max(config.max_ongoing_requests, 2 * biggest),
        logging_config={"enable_access_log": config.access_log},
    ).bind(config)


def start(config: ServeConfig, host: str = "127.0.0.1", port: int = 8000, address: Optional[str] = None,
          num_cpus: Optional[int] = None, object_store_bytes: Optional[int] = None) -> str:
    """Start (or join, with `address`) Ray, deploy the models and return the server's URL."""
    if not ray.is_initialized():
        kwargs: dict = {"include_dashboard": False, "configure_logging": False}
        if address:
            kwargs["address"] = address
        else:  # "local": a new instance, even where RAY_ADDRESS or a `ray start` cluster is around
            kwargs.update(address="local", num_cpus=num_cpus, object_store_memory=object_store_bytes)
        ray.init(**kwargs)
    serve.start(http_options={"host": host, "port": port}, logging_config={"enable_access_log": config.access_log})
    serve.run(build_app(config), name=APP_NAME, route_prefix="/", blocking=False)
    return f"http://{host}:{port}"


def stop(own_ray: bool) -> None:
    """Take the server down: with a Ray instance of our own, shutting Ray down stops every actor of
    Serve at once (and does not wait on a raylet a terminal's Ctrl-C already stopped); on a joined
    cluster only our application is deleted, Serve and the cluster stay up."""
    try:
        if own_ray:
            ray.shutdown()
        else:
            serve.delete(APP_NAME)
    except Exception as e:  # noqa: BLE001 - shutting down a half-started server
        log.warning("stopping the server failed: %s", e)
