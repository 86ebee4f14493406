"""A real S3-compatible server for the tests: moto's server mode, on loopback, one per run.

moto (5.2 and later) honours the conditional writes the checkpoint store's "latest" pointer relies on
(``If-None-Match: *`` and ``If-Match: <etag>`` on PutObject and CompleteMultipartUpload) and enforces
S3's part sizes; ``tests/ckptstore/test_s3server.py`` checks both against the running server, so a
moto that stopped honouring them fails there first. It sends nothing anywhere: it is a local Flask app.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from support.servers import free_port

ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key"
REGION = "us-east-1"


@dataclass
class S3Server:
    endpoint: str
    proc: subprocess.Popen[bytes]

    def client(self, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=access_key, aws_secret_access_key=secret_key)

    def credentials_file(self, folder: Path, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> Path:
        """A credentials file in the AWS shared-credentials form the setting names."""
        path = folder / "s3-credentials"
        path.write_text(f"[default]\naws_access_key_id = {access_key}\naws_secret_access_key = {secret_key}\n")
        path.chmod(0o600)
        return path


@contextmanager
def s3_server(log: Path, buckets: tuple[str, ...] = (), checks_keys: bool = False) -> Iterator[S3Server]:
    """moto's server on a free loopback port with ``buckets``, ready once it answers; stopped after.
    ``checks_keys``: it refuses every access key (none is known to its IAM), as a store refuses wrong
    credentials; its buckets are made by the requests it lets through before it starts checking."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if checks_keys:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(len(buckets))
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    server = S3Server(f"http://127.0.0.1:{port}", proc)
    try:
        c = server.client()
        deadline = time.monotonic() + 60
        while True:
            try:
                for b in buckets:
                    c.create_bucket(Bucket=b)
                if not checks_keys:
                    c.list_buckets()
                break
            except (BotoCoreError, ClientError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
