"""The checkpoint store's tests share one S3 server; each test gets a bucket of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from support.s3server import S3Server, s3_server


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture
def bucket(s3: S3Server) -> str:
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3.client().create_bucket(Bucket=name)
    return name
