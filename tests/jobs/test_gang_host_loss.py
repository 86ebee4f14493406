"""A gang never goes back to a host whose worker was lost: three `gpufleet worker` processes with
host names of their own on this machine, gloo ranks on the CPU, PostgreSQL and Redis, and a kill -9.

The gang takes two of the three hosts. One member host's worker is killed:
its ranks are gone within 2 s, every host's ranks stop, the gang is requeued
(one restart: a real loss) and placed on the two hosts whose workers live,
not back on the dead one, whose agent-style heartbeat the test keeps fresh
all along, as a host's agent would. The lost host is said, with why.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.fleet import FINAL, make_settings, register, unique, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

MLP = dict(in_features=8, hidden=[16, 16], out_features=3, task="classification", synthetic_samples=2048,
           global_batch_size=32, max_steps=100000, log_every=5, checkpoint_every=10, lr=3e-3)
ORPHAN_BOUND_S = 2.0


def _host(tmp_path: Path, request, name: str):
    return make_settings(tmp_path / name, "postgresql", request, simulate="2xH100-80GB", host_name=unique(name),
                         checkpoint_root=tmp_path / "shared-checkpoints", advertise_address="127.0.0.1",
                         network_interface="lo", rendezvous_timeout_s=60, lease_s=10.0)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _descendants(root: int) -> set[int]:
    """Every live process under ``root`` (its launchers, their ranks and resource trackers)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def test_a_gang_is_placed_again_on_live_hosts_and_never_back_on_the_dead_one(tmp_path, request, client_for,
                                                                               workers, scheduler):
    hosts = sorted((_host(tmp_path, request, n) for n in ("a", "b", "c")), key=lambda s: s.host_name)
    for s in hosts:
        register(s)  # and its heartbeat kept fresh all along, as the host's agent keeps it
    procs = {s.host_name: workers(s) for s in hosts}
    scheduler(hosts[0])
    c = client_for(hosts[0])
    r = c.post("/api/v1/trainings", json={"name": "gang", "recipe": "mlp", "config": MLP, "hosts": 2,
                                          "gpus_per_host": 2, "max_restarts": 2})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]

    def body() -> dict:
        b = c.get(f"/api/v1/trainings/{tid}").json()
        assert b["status"] not in FINAL, b
        return b

    first = wait_for(lambda: (b := body())["status"] == "running" and b["step"] >= 20 and b, 300,
                     "the gang past step 20", 0.2)
    placed = [h["host"] for h in first["hosts"]]
    victim = next(h for h in placed if h != first["host_name"])  # a member host, not rank 0's
    live = sorted(set(procs) - {victim})
    ranks = _descendants(procs[victim].proc.pid)
    assert len(ranks) >= 2, ranks  # its launcher and ranks
    killed = time.monotonic()
    procs[victim].kill9()
    while any(_alive(p) for p in ranks) and time.monotonic() - killed < 30:
        time.sleep(0.01)
    orphaned = time.monotonic() - killed
    requeued = wait_for(lambda: (b := body())["restarts"] >= 1 and b, 60, "the gang to be requeued", 0.1)
    t_requeued = time.monotonic() - killed
    again = wait_for(lambda: (b := body())["status"] == "running" and b["attempt"] >= 2
                     and all(h["status"] == "running" for h in b["hosts"]) and b, 120,
                     "the gang running again", 0.1)
    t_again = time.monotonic() - killed
    print(f"kill -9 of host {victim}'s worker: its ranks gone {orphaned:.2f}s; requeued at {t_requeued:.1f}s; "
          f"running again on {[h['host'] for h in again['hosts']]} at {t_again:.1f}s; "
          f"restarts {again['restarts']} of {again['max_restarts']}")
    assert orphaned <= ORPHAN_BOUND_S, f"the dead worker's ranks lived {orphaned:.1f}s"
    assert sorted(h["host"] for h in again["hosts"]) == live, again["hosts"]
    assert again["restarts"] == 1, again  # the loss itself, and nothing for the dead host
    retry = [e for e in c.get(f"/api/v1/trainings/{tid}/events").json()["data"] if e["kind"] == "retry"]
    assert len(retry) == 1 and victim in retry[0]["reason"] and "killed or lost" in retry[0]["reason"], retry
    # It trains on: its steps go on from the checkpoint, on the live hosts, with that one restart.
    moved_on = wait_for(lambda: (b := body())["step"] >= requeued["step"] + 10 and b, 240,
                        "the gang to train on", 0.2)
    assert moved_on["restarts"] == 1 and moved_on["attempt"] == again["attempt"], moved_on
    assert c.post(f"/api/v1/trainings/{tid}/cancel").status_code == 200
    wait_for(lambda: c.get(f"/api/v1/trainings/{tid}").json()["status"] == "cancelled", 60, "the cancel", 0.2)
    # The member host's log says why its launcher ended: the cancel, never a bare signal number.
    member = next(h for h in hosts if h.host_name == [x for x in live if x != again["host_name"]][0])
    text = wait_for(lambda: (t := (member.logs_dir / "trainings" / f"{tid}-{member.host_name}.log").read_text())
                    .count("[gpufleet] ended: ") and t, 30, "the member's launcher line", 0.2)
    assert "stopped by this worker (" in text and "exited with -" not in text, text[-2000:]
