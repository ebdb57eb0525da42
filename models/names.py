"""Names that code which must not import torch needs: the server's settings and its supervisor
process (``service/runtime/workers.py``), which loads no model. ``models.attention.BACKENDS`` (the
registry's own names) must equal ``BACKEND_NAMES``; a test checks it."""

BACKEND_NAMES: tuple[str, ...] = ("full", "flash", "probsparse", "performer", "nystrom")

# Batch sizes a compiled forecast batch is padded up to (see models/compile.py).
DEFAULT_BATCH_BUCKETS: tuple[int, ...] = (1, 4, 16, 32)

# The sentence encoder's name, and what clients may also call it (its sentence-transformers id).
TEXT_MODEL = "all-MiniLM-L6-v2"
TEXT_ALIASES: tuple[str, ...] = ("sentence-transformers/all-MiniLM-L6-v2",)

# Numeric precisions a model may be loaded in (models/precision.py). float32 first: the default,
# and the one every exactness contract is stated for.
PRECISION_NAMES: tuple[str, ...] = ("float32", "bfloat16", "int8", "float16")
DEFAULT_PRECISION = "float32"
