"""clglow served by Ray Serve over the Open Inference Protocol (KServe v2 REST).

`protocol` and `batching` are pure (no Ray); `app` (the deployment) and `cli` need the
``serve`` extra: ``pip install "clglow[serve]"``. Ray is imported only when serving starts.

    from clglow.serve.app import ModelSpec, ServeConfig, start
    url = start(ServeConfig(models=(ModelSpec("m", "/models/m.onnx"),)))
"""
from __future__ import annotations

INSTALL_HINT = 'pip install "clglow[serve]"'


def require_ray() -> None:
    """Raise an ImportError naming the extra when Ray Serve is not installed."""
    try:
        import fastapi  # noqa: F401
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as e:
        raise ImportError(f"clglow's serving needs Ray Serve ({e}); install it with: {INSTALL_HINT}") from e
