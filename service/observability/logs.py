"""The server's log format, for the single process, the supervisor and each worker alike."""

from __future__ import annotations

import logging

from service.settings import Settings


def configure_logging(settings: Settings) -> None:
    """Log lines with time, level, pid and logger at ``settings.log_level``."""
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s",
    )
