"""The test S3 server honours what the checkpoint store relies on; if it stopped, every store test's
"latest only moves forward" would pass for the wrong reason."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from support.s3server import S3Server


def test_put_object_honours_if_none_match_and_if_match(s3: S3Server, bucket: str) -> None:
    c = s3.client()
    first = c.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")["ETag"]
    with pytest.raises(ClientError) as exc:
        c.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")
    assert exc.value.response["Error"]["Code"] == "PreconditionFailed"
    c.put_object(Bucket=bucket, Key="k", Body=b"3", IfMatch=first)
    with pytest.raises(ClientError) as exc:
        c.put_object(Bucket=bucket, Key="k", Body=b"4", IfMatch=first)  # stale: another write came between
    assert exc.value.response["Error"]["Code"] == "PreconditionFailed"
    assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == b"3"
