"""A body model for the body-pool tests, in a module of its own: a helper process imports it
(to unpickle the class) and should not pay for the test module's imports (torch, the models)."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict


class PidProbe(BaseModel):
    """A body model whose packed form says which process packed it."""

    model_config = ConfigDict(strict=True)

    n: int

    def packed(self) -> dict[str, Any]:
        return {"n": self.n, "pid": os.getpid()}
