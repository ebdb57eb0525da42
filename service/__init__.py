"""attnserve's HTTP service: routes -> engine -> batcher -> servable models (see README.md).

``create_app`` (:mod:`service.app`) builds the FastAPI app; ``attnserve serve`` /
``python -m service`` (:mod:`service.cli`) runs it. By concern:

- :mod:`service.http`: routes, request and response bodies, middleware, body parsing, transport;
- :mod:`service.engine`: the engine, the model registry, ``auto`` attention, the batching workers
  and the servable models;
- :mod:`service.runtime`: one uvicorn server, several under a supervisor, or Ray Serve replicas;
- :mod:`service.observability`: Prometheus metrics and logging;
- beside them, what every layer shares: :mod:`~service.settings`, :mod:`~service.errors` (the one
  error hierarchy and status table), :mod:`~service.lifecycle` and :mod:`~service.state`.
"""

from service.engine.batching.allocator import bound_kernel_caches

# Before anything imports torch: oneDNN reads its cache sizes once (see
# service/engine/batching/allocator.py).
bound_kernel_caches()

__version__ = "0.1.0"

__all__ = ["__version__"]
