"""Fuzz every operation of the live OpenAPI schema with schemathesis.

The app is the product's own (`create_app`) on a simulated fleet with sign-in
required, and every case carries an admin's token so it reaches the route, not
just the gate. Each operation gets schema-valid and schema-invalid inputs
(positive and negative generation). The run is stateful where it matters: a
fixture seeds trainings (with events, metrics and a log), hosts, GPUs and
users, and every operation with path parameters runs a second time with them
pinned to those real ids (a training, this host, GPU 0), so the deep routes
see real rows, not only unknown ids. The run fails on any 5xx, a status code
the schema does not declare, a wrong content type, or a body that does not
match its declared schema. Every operation is run even after one fails, so a
failure lists all that were found.

Schemathesis never generates NaN or Infinity (JSON has neither, but Python's
JSON reader, and so the server's, takes them), so a third pass sends each
operation's body with every number in it, and every number its schema
declares, replaced by NaN, Infinity or -Infinity.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import uuid
from typing import Any

import pytest
import schemathesis
from sqlalchemy import select
from gpufleet.config import Settings
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.users.accounts import add_user
from gpufleet.users.groups import create_group
from gpufleet.users.tokens import create_token
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
# Cases per operation and mode: about 20 operations make several hundred cases.
# A longer run: GPUFLEET_TEST_FUZZ_EXAMPLES=200.
EXAMPLES = int(os.environ.get("GPUFLEET_TEST_FUZZ_EXAMPLES", "10"))
# How long one case may wait for its answer. The run checks what is answered, not how fast: an
# estimate is bounded by the server (estimate_budget_s in conftest.py), but after a trace past that
# budget the estimate process is started again, and importing torch on a loaded machine took longer
# than schemathesis's default of 10 s (a ReadTimeout on recommend that no server fault caused).
READ_TIMEOUT_S = 300


# A checkpoint of the first seeded training, as a run leaves one (the files routes serve it).
SEEDED_FILE = "checkpoints/step-3/model.pt"


def _seed_trainings(settings: Settings, owner: str) -> list[str]:
    """Trainings in several states, one with events, metrics and a log, as a run leaves them."""
    from gpufleet.db.models import TrainingMetric
    from gpufleet.db.session import write_session
    from gpufleet.jobs.logs import log_path
    from gpufleet.lifecycle.transitions import record_event
    from gpufleet.trainings import service
    from gpufleet.wire.training_requests import TrainingCreate

    with write_session(settings) as sess:
        rows = service.create_trainings(sess, settings, [
            TrainingCreate(name=f"seed-{i}", recipe="mlp", config={"max_steps": 5}) for i in range(3)
        ], owner)
        ids = [r.id for r in rows]
        for step in range(1, 4):
            sess.add(TrainingMetric(training_id=ids[0], step=step, loss=1.0 / step, metrics={"mse": 1.0 / step},
                                    rank_step_times=[0.01]))
        record_event(sess, ids[0], "progress", status="queued", reason="seeded for the fuzzer")
    service_cancel = service.cancel
    with write_session(settings) as sess:
        service_cancel(sess, ids[2], owner)
    path = log_path(settings, ids[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"line {i}\n" for i in range(50)))
    from gpufleet.trainings.files import checkpoint_dir

    checkpoint = checkpoint_dir(settings, ids[0]) / SEEDED_FILE.removeprefix("checkpoints/")
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.write_bytes(b"seeded checkpoint bytes")
    return [str(i) for i in ids]


def _seed_code(settings: Settings, owner: str) -> str:
    """A stored code archive, as `gpufleet run` leaves one."""
    import io
    import tarfile

    from gpufleet.trainings import code

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        body = b"print('hello')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    with session_scope(settings) as sess:
        info, _ = code.store(sess, settings, buf.getvalue(), owner)
    return info.hash


def _seed_session(settings: Settings, owner: str) -> str:
    """A queued session (stop and extend then meet a real one)."""
    from gpufleet.db.session import write_session
    from gpufleet.interactive import service
    from gpufleet.wire.sessions import SessionCreate

    with write_session(settings) as sess:
        row, _ = service.create(sess, settings, SessionCreate(gpus=1, hours=1), owner)
        return str(row.id)


def _seed_hook(settings: Settings, owner: str) -> str:
    """A webhook of the fuzzer's own (the hook routes answer only their owner)."""
    from gpufleet.notify import hooks

    with session_scope(settings) as sess:
        return str(hooks.create(sess, owner, "https://hooks.example.com/gpufleet").id)


def _seed_sweep(settings: Settings, owner: str) -> str:
    """A running sweep; no driver runs here, so its trials are never made (show, curves and cancel meet it)."""
    from gpufleet.db.session import write_session
    from gpufleet.sweeps import service
    from gpufleet.wire.sweep_requests import SweepCreate

    spec = SweepCreate(name="seed-sweep", recipe="mlp", config={"max_steps": 5}, space={"lr": [0.01, 0.1]})
    with write_session(settings) as sess:
        return str(service.start(sess, settings, spec, owner, admin=True).id)


def _seed_pool(settings: Settings) -> str:
    """A Slurm pool's row as `gpufleet pools add` leaves one (no cluster answers here: its nodes say why)."""
    from gpufleet.db.pools import Pool

    name = "pool-" + uuid.uuid4().hex[:6]
    with session_scope(settings) as sess:
        sess.add(Pool(name=name, options={"partition": "gpu"}, checkpoint_root="/srv/gpufleet/pool",
                      python="/usr/bin/python3"))
    return name


def _seed_booking(settings: Settings, owner: str) -> str:
    """A booking of the fuzzer's own, two days ahead, as the bookings service leaves one (show and cancel meet it)."""
    from datetime import timedelta

    from gpufleet.db.bookings import Booking, BookingGPU
    from gpufleet.db.models import GPU
    from gpufleet.db.types import utcnow

    start = utcnow().replace(second=0, microsecond=0) + timedelta(days=2)
    with session_scope(settings) as sess:
        gpu = sess.scalars(select(GPU).order_by(GPU.index)).first()
        b = Booking(owner=owner, start_at=start, end_at=start + timedelta(hours=1), gpu_count=1,
                    host_id=gpu.host_id if gpu else None, created_by=owner)
        sess.add(b)
        sess.flush()
        if gpu is not None:
            sess.add(BookingGPU(booking_id=b.id, gpu_id=gpu.id, host_id=gpu.host_id, gpu_index=gpu.index,
                                start_at=b.start_at, end_at=b.end_at))
        return str(b.id)


# Routes that reach 2xx only with a running worker behind them; their own tests run one.
NEEDS_A_WORKER = {
    "POST /api/v1/sessions/{session_id}/shell",  # tests/interactive/test_shell.py
    "POST /api/v1/sessions/{session_id}/open",  # a running notebook: tests/e2e/test_session_notebook.py
    "POST /api/v1/sessions/{session_id}/join",  # a running notebook: tests/e2e/test_notebook_lab.py
}


def _order(op) -> tuple[int, int]:
    """Deletes last, the deepest path first (a deleted group cannot answer the routes under it);
    before them a session's stop (extend must meet it running)."""
    if op.method.upper() == "DELETE":
        return 2, -op.path.count("/")
    return (1 if op.path.endswith("/{session_id}/stop") else 0), 0


@pytest.fixture
def live_app(fuzz_settings: Settings):
    from gpufleet.api.app import create_app
    from gpufleet.api.routes.selection import warm_estimates
    from gpufleet.telemetry.inventory import register_host

    upgrade_database(fuzz_settings)
    register_host(fuzz_settings)
    name = "fuzzer-" + uuid.uuid4().hex[:6]
    member, group = f"member-{uuid.uuid4().hex[:6]}", f"group-{uuid.uuid4().hex[:6]}"
    with session_scope(fuzz_settings) as sess:
        add_user(sess, name, "admin")
        token = create_token(sess, name).secret
        add_user(sess, member, "member")
        # The member's token, for the revoke route (the fuzzer's own must outlive the run).
        member_token = str(create_token(sess, member).id)
        add_user(sess, f"viewer-{uuid.uuid4().hex[:6]}", "viewer")
        create_group(sess, group)
    ids = {"training_id": _seed_trainings(fuzz_settings, name), "host": [fuzz_settings.host_name], "index": [0, 1],
           "code_hash": [_seed_code(fuzz_settings, name)],
           # `name` is a group's, a user's (quota routes) or a pool's; `member` joins the group, then leaves it.
           "name": [group, member, _seed_pool(fuzz_settings)], "member": [member], "path": [SEEDED_FILE],
           # `kind` pairs with `name` by position: the group's limit, then the member's (the pool has none).
           "session_id": [_seed_session(fuzz_settings, name)], "kind": ["group", "user", "group"],
           "token_id": [member_token],
           "hook_id": [_seed_hook(fuzz_settings, name)], "sweep_id": [_seed_sweep(fuzz_settings, name)],
           "booking_id": [_seed_booking(fuzz_settings, name)]}
    app = create_app(fuzz_settings)
    # As `serve` does: the estimate process is started, and the defaults traced, before the first request.
    asyncio.run(warm_estimates(app, fuzz_settings))
    return app, token, ids


def _fuzz(operation, mode: GenerationMode, headers: dict[str, str],
          pinned: dict[str, list] | None = None, reached: set[str] | None = None) -> int:
    sent = 0

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:
        nonlocal sent
        sent += 1
        if pinned:
            params = dict(case.path_parameters or {})
            for name, choices in pinned.items():
                if name in params:
                    params[name] = choices[sent % len(choices)]
            case.path_parameters = params
        response = case.call_and_validate(headers=headers, checks=CHECKS, timeout=READ_TIMEOUT_S)
        if reached is not None and pinned and response.status_code < 300:
            reached.add(f"{operation.method.upper()} {operation.path}")

    run()
    return sent


NON_FINITE = (math.nan, math.inf, -math.inf)


def _described(exc: BaseException) -> str:
    """The failure and, for a group (Hypothesis's flaky or multiple failures), each one inside it."""
    text = f"{type(exc).__name__}\n{str(exc)[:3000]}"
    for inner in getattr(exc, "exceptions", ()):
        text += f"\n  - {type(inner).__name__}: {str(inner)[:1500]}"
    return text


def _resolve(root: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = root["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _numeric_properties(root: dict[str, Any], node: Any) -> list[str]:
    """The properties of a body schema that are numbers (directly or as one choice of anyOf)."""
    node = _resolve(root, node)
    found = []
    for name, prop in (node.get("properties") or {}).items() if isinstance(node, dict) else ():
        prop = _resolve(root, prop)
        kinds = [prop.get("type")] + [_resolve(root, c).get("type") for c in prop.get("anyOf", [])]
        if any(k in ("number", "integer") for k in kinds):
            found.append(name)
    return found


def _non_finite(value: Any, pick: int) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return NON_FINITE[pick % 3]
    if isinstance(value, dict):
        return {k: _non_finite(v, pick + i) for i, (k, v) in enumerate(value.items())}
    if isinstance(value, list):
        return [_non_finite(v, pick + i) for i, v in enumerate(value)]
    return value


def _fuzz_non_finite(operation, client, headers: dict[str, str], root: dict[str, Any]) -> int:
    """Send the operation's generated bodies with NaN and Infinity in every number; 0 without a JSON body."""
    content = ((root["paths"][operation.path][operation.method.lower()].get("requestBody") or {})
               .get("content") or {})
    if "application/json" not in content:
        return 0
    numeric = _numeric_properties(root, content["application/json"].get("schema"))
    sent = 0

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    def run(case) -> None:
        nonlocal sent
        sent += 1
        # An optional body that was left out: an empty object, to carry the declared numbers.
        body = _non_finite({} if case.body is NOT_SET else case.body, sent)
        if isinstance(body, dict):
            body.update({name: NON_FINITE[(sent + i) % 3] for i, name in enumerate(numeric)})
        response = client.request(case.method, case.formatted_path, params=case.query,
                                  headers={**headers, "content-type": "application/json"},
                                  content=json.dumps(body).encode())
        assert response.status_code < 500, response.text[:500]
        case.validate_response(response, checks=CHECKS)

    run()
    return sent


@pytest.mark.slow
def test_every_operation_answers_within_its_schema(live_app) -> None:
    app, token, ids = live_app
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    cases = non_finite = 0
    pinned_ops = 0
    pinned_names: set[str] = set()
    reached: set[str] = set()
    operations = [result.ok() for result in schema.get_all_operations()]
    operations.sort(key=_order)
    for op in operations:
        has_path = any(p.location == "path" for p in op.path_parameters)
        if has_path and f"{op.method.upper()} {op.path}" not in NEEDS_A_WORKER:
            pinned_names.add(f"{op.method.upper()} {op.path}")
        # Every operation with path parameters also runs with them pinned to real rows.
        for pinned in ([None, ids] if has_path else [None]):
            pinned_ops += pinned is not None and f"{op.method.upper()} {op.path}" in pinned_names
            for mode in MODES:
                try:
                    cases += _fuzz(op, mode, headers, pinned, reached)
                except Unsatisfiable:
                    # An operation with no parameters and no body has nothing to make invalid.
                    if mode is not GenerationMode.NEGATIVE:
                        raise
                except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collect every operation's failure
                    where = " with real ids" if pinned else ""
                    failures.append(f"{op.method.upper()} {op.path}{where} ({mode.value}): {_described(exc)}")
    from fastapi.testclient import TestClient

    with TestClient(app, raise_server_exceptions=False) as client:
        for op in operations:
            try:
                non_finite += _fuzz_non_finite(op, client, headers, schema.raw_schema)
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collect every operation's failure
                failures.append(f"{op.method.upper()} {op.path} (NaN/Infinity): {type(exc).__name__}\n"
                                f"{str(exc)[:3000]}")
    print(f"schemathesis: {len(operations)} operations ({pinned_ops} also with real ids), {cases} cases,"
          f" {non_finite} with NaN/Infinity, {len(failures)} failing")
    assert len(operations) >= 4 and cases >= 100 and pinned_ops >= 7 and non_finite >= 50
    # Each of them answered 2xx at least once with real ids: the deep routes were reached.
    assert reached >= pinned_names and len(pinned_names) == pinned_ops, \
        f"never 2xx with real ids: {sorted(pinned_names - reached)}"
    assert not failures, "\n\n".join(failures)
