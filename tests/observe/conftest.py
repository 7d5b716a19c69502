"""The receivers, started once per session and stopped after (fixtures/receivers.py)."""

from __future__ import annotations

from typing import Iterator

import pytest

from fixtures.receivers import receiver


@pytest.fixture(scope="session")
def mlflow_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with receiver("mlflow", tmp_path_factory.mktemp("mlflow")) as (url, _):
        yield url


@pytest.fixture(scope="session")
def phoenix_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with receiver("phoenix", tmp_path_factory.mktemp("phoenix")) as (url, _):
        yield url
