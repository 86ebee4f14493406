"""A live app on a simulated fleet with sign-in required, for the schema fuzzer.

Run on both databases: PostgreSQL is what a fleet runs, and its types (32-bit
integers, JSONB, arrays) refuse values SQLite would take.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gpufleet.config import Settings, load_settings

SECRET = "fuzz-secret-" + "y" * 40


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fuzz_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    db = {}
    if request.param == "postgresql":
        db["database_url"] = request.getfixturevalue("pg_migrated_url")
    return load_settings(
        data_dir=tmp_path / "gpufleet-data",
        simulate="4xH100-80GB",
        simulate_topology="nvlink-pairs",
        # A host of its own, as on a database other hosts share.
        host_name="fuzz-" + uuid.uuid4().hex[:8],
        auth="on",
        secret_key=SECRET,
        # The fuzzer creates trainings as fast as it can; limits are tested elsewhere.
        create_rate_per_minute=10000,
        estimate_rate_per_minute=10000,
        # A generated config may describe a model that takes long to trace: refused (422) well within the
        # client's read timeout, as any server may choose.
        estimate_budget_s=5,
        **db,
    )
