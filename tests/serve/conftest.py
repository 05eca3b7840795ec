"""One local Ray instance and one clglow server for the serving tests (127.0.0.1 only).

The server holds small ResNet-style and BERT-style models, fixed and symbolic batch, and the
symbolic-batch ResNet and a weight-bound MLP twice each (dynamic batching on and off), in 2 replicas so that a killed
replica leaves one serving. Ray gets 2 CPUs and a 256 MB object store whatever the machine.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/serve for `serve_helpers`

from serve_helpers import MAX_BODY, REPLICAS, free_port, make_models, wait_ready  # noqa: E402


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance on 127.0.0.1, 2 CPUs, small object store, no dashboard."""
    pytest.importorskip("ray.serve", reason='needs the serve extra: pip install "clglow[serve]"')
    import ray

    ray.init(address="local", num_cpus=2, object_store_memory=256 << 20, include_dashboard=False,
             _node_ip_address="127.0.0.1", configure_logging=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def served_models(tmp_path_factory) -> dict:
    """The test models, saved as files: {name: Served}."""
    return {m.name: m for m in make_models(str(tmp_path_factory.mktemp("serve-models")))}


@pytest.fixture(scope="session")
def server(ray_session, served_models):
    """The clglow server: (base URL, {name: Served})."""
    from clglow.serve.app import ModelSpec, ServeConfig, start

    models = list(served_models.values())
    config = ServeConfig(models=tuple(ModelSpec(m.name, m.path, max_batch_size=m.max_batch_size, batch_wait_ms=5.0)
                                      for m in models),
                         replicas=REPLICAS, num_cpus=0.5, max_body_bytes=MAX_BODY)
    port = free_port()
    url = start(config, host="127.0.0.1", port=port)
    wait_ready(url, 120)
    yield url, {m.name: m for m in models}
    from ray import serve

    serve.shutdown()
