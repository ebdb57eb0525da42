"""Queues and batches: a pure policy (``policy``), a worker per model (``worker``), the batch
runner with split-and-retry (``execute``), the device runtime (``device``) and the routes' face
(``batcher``)."""
