"""Queues and batches: a pure policy (``policy``), a worker per model (``worker``) with its
refusals on arrival (``admission``), the batch runner with split-and-retry (``execute``), the
device runtime (``device``) with the C allocator's settings (``allocator``) and the engine's face
(``batcher``)."""
