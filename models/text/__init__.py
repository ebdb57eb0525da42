"""Text models with a per-call attention backend: :class:`SentenceEncoder` (:mod:`.encoder`, the
shipped all-MiniLM-L6-v2 and users' sentence-transformers folders) and
:class:`~models.text.classifier.TextClassifier` (:mod:`.classifier`, cross-encoders and sequence
classifiers), both a :class:`~models.text.base.TextModel` with their own head.

The model kinds (encoder, classifier, causal reranker, sparse, multi-vector) live here; what
they stand on is grouped by concern: :mod:`.network` (the BERT-family encoder, its layers, heads,
pooling and cost models), :mod:`.tokens` (tokenizers, length rules, truncation, windows, prompts,
pairs), :mod:`.folders` (reading sentence-transformers and transformers folders and checkpoints)
and :mod:`.quality` (how close each backend comes to exact attention).

>>> from models.text import SentenceEncoder
>>> encoder = SentenceEncoder.load()  # max_tokens=256, cpu, float32
>>> encoder.encode(["a text", "another"], backend="flash").shape  # unit-norm rows
torch.Size([2, 384])
"""

from models.text.encoder import SentenceEncoder
from models.text.network.config import PRESETS, BertConfig

__all__ = ["PRESETS", "BertConfig", "SentenceEncoder"]
