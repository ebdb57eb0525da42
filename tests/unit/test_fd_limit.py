"""The open-file limit raised at start (service.runtime.fd_limit): every connection is a file
descriptor, and a process left at a 1,024 soft limit stops accepting connections past it."""

from __future__ import annotations

import logging

import pytest

resource = pytest.importorskip("resource")  # no RLIMIT_NOFILE on Windows

from service.runtime.fd_limit import raise_fd_limit  # noqa: E402


@pytest.fixture
def low_soft_limit() -> object:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # an unprivileged process may
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_soft_limit_is_raised_to_the_hard_one_and_logged(
    low_soft_limit: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="attnserve"):
        now = raise_fd_limit(max_connections=100)
    assert now == resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 256
    if low_soft_limit != resource.RLIM_INFINITY:
        assert now == low_soft_limit
    assert f"open-file limit raised from 256 to {now}" in caplog.text
    assert "too low" not in caplog.text


def test_a_limit_too_low_for_max_connections_is_a_warning(
    low_soft_limit: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="attnserve"):
        raise_fd_limit(max_connections=10**9)
    assert any(
        r.levelno == logging.WARNING and "too low for max_connections" in r.getMessage()
        for r in caplog.records
    )
