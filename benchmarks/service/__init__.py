"""The server under load: throughput and latency per backend (:mod:`.http_load`) and per
precision (:mod:`.precision_http`), what the HTTP path adds (:mod:`.overhead`), worker managers and worker loss (:mod:`.worker_managers`,
:mod:`.worker_kill`), scale-out, head-of-line blocking, event-loop stalls, large requests and
thread settings over HTTP. Each is ``python -m benchmarks.service.<name>``."""
