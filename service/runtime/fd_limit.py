"""The process's open-file limit, raised to what the OS allows before serving.

Every connection is a file descriptor. Many systems start processes with a soft limit of 1,024
(systemd's default, macOS's 256) under a much higher hard limit: past it, ``accept`` fails with
EMFILE, asyncio stops accepting for a second, and ``/healthz`` goes unanswered however well the
connection limits (:mod:`service.http.connections`) shed stalled sockets (issue 50 item 2). An
unprivileged process may raise its soft limit up to the hard one, as nginx's
``worker_rlimit_nofile`` and uvicorn's peers (gunicorn, hypercorn) leave to the operator; here
it is done at start and logged, once per process (each worker runs this itself).
"""

from __future__ import annotations

import logging

log = logging.getLogger("attnserve")

# Descriptors a process needs beside its connections: the listener, model files, the metrics
# directory, helper pipes, log files.
SPARE_FDS = 64


def raise_fd_limit(max_connections: int) -> int | None:
    """Raise RLIMIT_NOFILE's soft limit to the hard one (capped where the hard one is unlimited)
    and log the result, with a warning when it cannot hold ``max_connections`` connections.
    Returns the soft limit now, or None where the platform has no such limit (Windows)."""
    try:
        import resource
    except ImportError:  # Windows: no RLIMIT_NOFILE
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # RLIM_INFINITY is refused as a soft limit on macOS (its real ceiling is kern.maxfilesperproc);
    # 1,048,576 is Linux's default fs.nr_open.
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("open-file limit raised from %d to %d (the hard limit)", soft, target)
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("open-file limit stays %d: raising it to %d failed (%s)", soft, target, exc)
    else:
        log.info("open-file limit: %d (the hard limit is %d)", soft, hard)
    if soft != resource.RLIM_INFINITY and soft < max_connections + SPARE_FDS:
        log.warning(
            "open-file limit %d is too low for max_connections %d: raise the hard limit "
            "(ulimit -Hn, LimitNOFILE=, docker --ulimit nofile=) or lower max_connections",
            soft,
            max_connections,
        )
    return int(soft)
