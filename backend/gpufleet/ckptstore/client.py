"""The store a worker talks to: one boto3 client, built from the settings and a credentials file."""

from __future__ import annotations

import configparser
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from gpufleet.config import CheckpointStoreSettings

# Multipart above 16 MiB in 16 MiB parts, four at once; S3's smallest part is 5 MiB.
TRANSFER = TransferConfig(multipart_threshold=16 * 2**20, multipart_chunksize=16 * 2**20, max_concurrency=4)


class StoreError(RuntimeError):
    """The store cannot be used as set: the message says which setting to fix."""


class StoreUnreachable(StoreError):
    """The store did not answer (down, or not reachable from here): perhaps for a while only."""


@dataclass
class Store:
    client: Any  # a boto3 S3 client
    bucket: str
    prefix: str
    transfer: TransferConfig = TRANSFER

    def key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")


def read_credentials(path: Path) -> tuple[str, str]:
    """The access key and secret of the ``[default]`` profile of an AWS shared-credentials file."""
    parser = configparser.ConfigParser()
    try:
        text = path.read_text()
    except OSError as exc:
        raise StoreError(f"GPUFLEET_CHECKPOINT_STORE_CREDENTIALS_FILE: cannot read {path}: {exc.strerror}") from None
    try:
        parser.read_string(text)
        section = parser["default"]
        return section["aws_access_key_id"].strip(), section["aws_secret_access_key"].strip()
    except (configparser.Error, KeyError):
        raise StoreError(f"GPUFLEET_CHECKPOINT_STORE_CREDENTIALS_FILE: {path} has no [default] profile with "
                         "aws_access_key_id and aws_secret_access_key") from None


def open_store(settings: CheckpointStoreSettings, connect_timeout_s: float = 10.0) -> Store | None:
    """The store the settings name (None when GPUFLEET_CHECKPOINT_STORE is unset). Credentials come from the
    file the settings name and nowhere else: never the environment, never boto3's own search."""
    if not settings.checkpoint_store:
        return None
    if settings.checkpoint_store_credentials_file is None:
        raise StoreError("GPUFLEET_CHECKPOINT_STORE is set but GPUFLEET_CHECKPOINT_STORE_CREDENTIALS_FILE is not: "
                         "name a file with the store's access key and secret")
    key_id, secret = read_credentials(Path(settings.checkpoint_store_credentials_file))
    session = boto3.session.Session(aws_access_key_id=key_id, aws_secret_access_key=secret,
                                    region_name=settings.checkpoint_store_region)
    client = session.client(
        "s3", endpoint_url=settings.checkpoint_store_endpoint,
        config=Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=connect_timeout_s,
                      read_timeout=60, request_checksum_calculation="when_supported",
                      response_checksum_validation="when_supported", s3={"addressing_style": "path"}))
    return Store(client, settings.checkpoint_bucket, settings.checkpoint_prefix)


def check(store: Store) -> None:
    """One clear error now, at start, rather than a failure at the first checkpoint: the bucket exists and
    these credentials may write and delete in it."""
    try:
        store.client.head_bucket(Bucket=store.bucket)
        probe = store.key(".gpufleet-probe")
        store.client.put_object(Bucket=store.bucket, Key=probe, Body=b"")
        store.client.delete_object(Bucket=store.bucket, Key=probe)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("404", "NoSuchBucket") or status == 404:
            raise StoreError(f"GPUFLEET_CHECKPOINT_STORE: bucket {store.bucket!r} does not exist at the store's "
                             "endpoint; create it or name another") from None
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch") or status == 403:
            raise StoreError(f"GPUFLEET_CHECKPOINT_STORE_CREDENTIALS_FILE: the store refused these credentials "
                             f"for bucket {store.bucket!r} ({code or status}); check the key, its secret and its "
                             "rights to write there") from None
        if isinstance(status, int) and status >= 500:
            raise StoreUnreachable(f"the checkpoint store {store.url} answered {code or status}") from None
        raise StoreError(f"GPUFLEET_CHECKPOINT_STORE: {store.url} answered {code or status}") from None
    except BotoCoreError as exc:
        raise StoreUnreachable(f"GPUFLEET_CHECKPOINT_STORE_ENDPOINT: cannot reach the store: {exc}") from None


def is_precondition_failed(exc: ClientError) -> bool:
    """A conditional write refused: another write came first (412), or one is under way (409)."""
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412)
