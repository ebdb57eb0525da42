"""Fixtures: the cross-encoder and classifier folders (built once for the package) and one app
serving them all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service.classifiers.helpers import save_classifier_folders
from tests.service.helpers import folders_client


@pytest.fixture(scope="package")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return save_classifier_folders(tmp_path_factory.mktemp("classifiers"))


@pytest.fixture(scope="package")
def client(folders: dict[str, Path]) -> Iterator[Any]:
    with folders_client(folders.values()) as c:
        yield c
