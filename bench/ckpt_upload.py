"""What the checkpoint store costs: its upload against the S3 library's own transfer of the same files,
and a training's step time with and without uploads running beside it.

A checkpoint of ``--files`` files, ``--mb`` MiB in all, is uploaded to an S3-compatible server (moto's
server mode, started here on loopback: the test extra's) ``--rounds`` times by
``gpufleet.ckptstore.upload_checkpoint`` (read through memberfs, SHA-256 on the way, each file checked
against the store's copy, the manifest, the conditional ``latest``) and by boto3's ``upload_file`` of the
same files with the same transfer settings, the baseline. Then a stand-in for a rank (a process doing
fixed matrix products per step, as a training's rank runs apart from its worker) runs ``--steps`` steps
alone, and again while this process uploads the checkpoint over and over in a background thread, as the
worker does (its thread at the worker's upload priority); the median step times are compared. The store
runs on this machine too, at the lowest priority as it stands for another machine, but its work still
competes with the steps: with a remote store the figure is an upper bound.

    python bench/ckpt_upload.py [--mb 256] [--files 4] [--rounds 3] [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import boto3

from gpufleet.ckptstore import open_store, upload_checkpoint
from gpufleet.config import CheckpointStoreSettings
from gpufleet.jobs.ckpt_uploads import lower_priority

_STEPS = r"""
import sys, time, torch
torch.set_num_threads(1)
a = torch.randn(256, 256)
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    for _ in range(20):
        a = torch.tanh(a @ a)
    print(time.perf_counter() - t, flush=True)
"""


def _server(port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    # At the lowest priority: it stands for a store on another machine, whose work is not this host's.
    argv = ["nice", "-n", "19", sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    raise SystemExit("moto's server did not start")


def _steps(n: int) -> float:
    out = subprocess.run([sys.executable, "-c", _STEPS, str(n)], capture_output=True, text=True, check=True)
    times = [float(x) for x in out.stdout.split()]
    return statistics.median(times[len(times) // 10:])  # the first steps warm up


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpufleet-ckpt-bench-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = _server(port)
    try:
        creds = work / "creds"
        creds.write_text("[default]\naws_access_key_id = bench\naws_secret_access_key = bench\n")
        store = open_store(CheckpointStoreSettings(checkpoint_store="s3://bench/ckpt",
                                                   checkpoint_store_endpoint=f"http://127.0.0.1:{port}",
                                                   checkpoint_store_credentials_file=creds))
        assert store is not None
        store.client.create_bucket(Bucket="bench")
        ckpt = work / "t" / "step-1"
        ckpt.mkdir(parents=True)
        for i in range(args.files):
            (ckpt / f"shard-{i}.bin").write_bytes(os.urandom(args.mb * 2**20 // args.files))
        raw = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                           aws_access_key_id="bench", aws_secret_access_key="bench")
        ours, theirs = [], []
        for r in range(args.rounds):
            t = time.perf_counter()
            upload_checkpoint(store, "t", work / "t", "step-1")
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            for f in sorted(ckpt.iterdir()):
                raw.upload_file(str(f), "bench", f"raw/{r}/{f.name}", Config=store.transfer)
            theirs.append(time.perf_counter() - t)
        mb = args.mb
        print(f"upload of {mb} MiB in {args.files} files, median of {args.rounds}: "
              f"ckptstore {mb / statistics.median(ours):.1f} MiB/s, boto3 upload_file "
              f"{mb / statistics.median(theirs):.1f} MiB/s "
              f"(ckptstore takes {statistics.median(ours) / statistics.median(theirs):.2f}x the time)")
        # Alone and with uploads in turn, so a change of the machine's load between them weighs on both.
        alone, beside, done = [], [], [0]
        for _ in range(args.rounds):
            alone.append(_steps(args.steps))
            stop = threading.Event()

            def keep_uploading(stop: threading.Event = stop) -> None:
                lower_priority()  # as the worker's upload thread does
                while not stop.is_set():
                    upload_checkpoint(store, "t", work / "t", "step-1")
                    done[0] += 1

            th = threading.Thread(target=keep_uploading, daemon=True)
            th.start()
            beside.append(_steps(args.steps))
            stop.set()
            th.join()
        a, b = statistics.median(alone), statistics.median(beside)
        print(f"step time, median of {args.rounds} runs of {args.steps} steps: {a * 1000:.2f} ms alone, "
              f"{b * 1000:.2f} ms with uploads running ({done[0]} uploads of {mb} MiB meanwhile): "
              f"{100 * (b / a - 1):+.1f}%; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        server.terminate()
        server.wait(10)
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
