"""Text models whose backbone is any transformers model that routes attention through
transformers' attention interface (Qwen3, Gemma 3, Llama-style LLM embedders, NomicBERT, ...), run
with our backends chosen per call through the bridge the transformers forecasters use
(:mod:`models.hf_forecast.bridge`).

- :mod:`.config`: what its ``config.json`` says (sizes, grouped heads), and the refusal of an
  architecture that computes attention itself;
- :mod:`.network`: :class:`~.network.HFBackbone`, the model behind our encoder's interface
  (packed batches in, token states or pooled vectors out);
- :mod:`.memory`: its peak memory and work, per backend.

The sentence-transformers pipeline around it (pooling, ``Dense``, ``Normalize``, prompts) is the
one our own encoders use (:class:`models.text.SentenceEncoder`).
"""
