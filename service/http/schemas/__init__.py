"""Request and response bodies (pydantic), one module per task (``text``, ``forecast``), the
shared parts in ``common`` and the number-array validators in ``arrays``."""
