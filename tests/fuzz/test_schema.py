"""Fuzz every operation of the live OpenAPI schema with schemathesis.

The app is the product's own (`create_app`) on a simulated fleet with sign-in
required, and every case carries an admin's token so it reaches the route, not
just the gate. Each operation gets schema-valid and schema-invalid inputs
(positive and negative generation). The run fails on any 5xx, a status code
the schema does not declare, a wrong content type, or a body that does not
match its declared schema. Every operation is run even after one fails, so a
failure lists all that were found.
"""

from __future__ import annotations

import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gpufleet.api.security.users import add_user, create_token
from gpufleet.config import Settings
from gpufleet.db.session import session_scope, upgrade_database

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
# Cases per operation and mode: about 20 operations make several hundred cases.
EXAMPLES = 10


@pytest.fixture
def live_app(fuzz_settings: Settings):  # noqa: ANN201
    from gpufleet.api.app import create_app
    from gpufleet.telemetry.inventory import register_host

    upgrade_database(fuzz_settings)
    register_host(fuzz_settings)
    name = "fuzzer-" + uuid.uuid4().hex[:6]
    with session_scope(fuzz_settings) as sess:
        add_user(sess, name, "admin")
        token = create_token(sess, name).secret
    return create_app(fuzz_settings), token


def _fuzz(operation, mode: GenerationMode, headers: dict[str, str]) -> int:  # noqa: ANN001
    sent = 0

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:  # noqa: ANN001
        nonlocal sent
        sent += 1
        case.call_and_validate(headers=headers, checks=CHECKS)

    run()
    return sent


@pytest.mark.slow
def test_every_operation_answers_within_its_schema(live_app) -> None:  # noqa: ANN001
    app, token = live_app
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    cases = 0
    operations = [result.ok() for result in schema.get_all_operations()]
    for op in operations:
        for mode in MODES:
            try:
                cases += _fuzz(op, mode, headers)
            except Unsatisfiable:
                # An operation with no parameters and no body has nothing to make invalid.
                if mode is not GenerationMode.NEGATIVE:
                    raise
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collect every operation's failure
                failures.append(f"{op.method.upper()} {op.path} ({mode.value}): {type(exc).__name__}\n{str(exc)[:3000]}")
    print(f"schemathesis: {len(operations)} operations, {cases} cases, {len(failures)} failing")
    assert len(operations) >= 4 and cases >= 100
    assert not failures, "\n\n".join(failures)
