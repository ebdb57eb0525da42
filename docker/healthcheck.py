#!/usr/bin/env python3
"""Container health probe: exit 0 when ``GET /healthz`` answers 2xx, 1 otherwise.

Used by the image's HEALTHCHECK and by compose. Standard library only, so the runtime image
needs no curl or wget. ``/healthz`` means "the process is alive"; readiness (models loaded and
warmed up) is ``/readyz``, which an orchestrator's readiness probe should use instead.
"""

import os
import sys
import urllib.request

path = sys.argv[1] if len(sys.argv) > 1 else "/healthz"
port = os.environ.get("ATTNSERVE_PORT", "8000")
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=4) as response:
        sys.exit(0 if 200 <= response.status < 300 else 1)
except Exception as error:  # any failure (refused, timeout, non-2xx) is "unhealthy"
    print(f"unhealthy: {error}", file=sys.stderr)
    sys.exit(1)
