"""``python -m service [serve ...]``: the same as the ``attnserve`` command (``serve`` by default)."""

import sys

from service.cli import main

sys.exit(main(sys.argv[1:] or ["serve"]))
