"""The all-MiniLM-L6-v2 sentence encoder with a per-call attention backend.

>>> from models.text import SentenceEncoder
>>> encoder = SentenceEncoder.load()  # max_tokens=256, cpu, float32
>>> encoder.encode(["a text", "another"], backend="flash").shape  # unit-norm rows
torch.Size([2, 384])
"""

from models.text.config import PRESETS, BertConfig
from models.text.encoder import SentenceEncoder

__all__ = ["PRESETS", "BertConfig", "SentenceEncoder"]
