"""Stand-ins for the batching policy's inputs: a pending request with only the fields
:func:`service.engine.batching.policy.next_batch` reads, so the decision is tested as a pure
function (no worker, no HTTP)."""

from __future__ import annotations

from dataclasses import dataclass

from service.engine.batching.policy import BatchKey
from service.engine.servables.base import TextCall

# The key most policy tests batch on: flash attention, texts of up to 16 tokens.
FLASH = BatchKey(TextCall("flash"), 16)


@dataclass
class FakePending:
    """A queued request as the policy sees it: its batch key (default :data:`FLASH`), rows,
    longest row in tokens, arrival and deadline (seconds on the policy's clock), and its flags."""

    key: BatchKey = FLASH
    n_rows: int = 1
    longest: int = 10
    enqueued_at: float = 0.0
    deadline: float = 100.0
    cancelled: bool = False
    arrived_idle: bool = False
    priority: int = 0
