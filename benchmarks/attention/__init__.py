"""Attention backends alone and in the Informer: latency, memory and error per backend and
length (:mod:`.backends`, on a GPU :mod:`.gpu`), the Informer's forward as its context grows
(:mod:`.informer_long`), the batcher's memory estimate (:mod:`.memory`) and cost estimate
(:mod:`.cost_model`) against measurement. Each is ``python -m benchmarks.attention.<name>``."""
