"""The S3 implementation of `ObjectStore` (boto3); tested against SeaweedFS on loopback.

Every botocore failure is translated at this seam into the room's errors, so a caller sees
"endpoint does not answer" or "credentials refused" instead of a botocore stack, and the
retry budget is small so an unreachable region fails fast and the next tier is tried.
"""

from __future__ import annotations

import base64
import builtins
import functools
import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from rackscale.checkpoint.errors import (
    AlreadyExists,
    CheckpointError,
    ObjectMissing,
    StoreAuthError,
    StoreUnreachable,
)
from rackscale.checkpoint.objectstore import ObjectInfo
from rackscale.redact import redact, redact_url, url_secrets

F = TypeVar("F", bound=Callable[..., Any])
SMALL = 1 << 20  # a put up to this size is metadata (manifest, pointer, part record)

_AUTH_CODES = {"SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "403",
               "InvalidToken", "ExpiredToken"}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound", "NoSuchUpload", "NoSuchBucket"}


def _translate(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(self: S3Store, *args: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            ReadTimeoutError,
        )
        try:
            return fn(self, *args, **kwargs)
        # A connection dropped mid-request (a busy or restarting server) is the tier being
        # away like any other: the saver records it and stays local, the reader tries the
        # next tier. Untranslated, it killed the saver's background thread.
        except (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError,
                ConnectionClosedError) as err:
            raise StoreUnreachable(
                f"store {self.name!r} ({self.shown}) does not answer: {self._redact(err)}. "
                "Check that the "
                f"endpoint URL and port are right and the server is running.") from None
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            if code in _AUTH_CODES:
                raise StoreAuthError(
                    f"store {self.name!r} ({self.shown}) refused the credentials ({code}). "
                    f"Check the access key and secret in the environment variables named by "
                    f"the tiers config.") from None
            if code == "PreconditionFailed":
                raise AlreadyExists(f"{self.name}: {args[0] if args else '?'} already exists "
                                    f"(write-once)") from None
            if code in _MISSING_CODES:
                raise ObjectMissing(f"{self.name}: {code} for {args[0] if args else '?'} in "
                                    f"bucket {self.bucket}") from None
            raise CheckpointError(f"store {self.name!r}: {code}: {self._redact(err)}") from None
    return wrapper  # type: ignore[return-value]  # wraps fn: the same arguments and result


class S3Store:
    """A bucket on an S3 endpoint (AWS, SeaweedFS, MinIO...). Keys are used as given."""

    min_part_size = 5 << 20

    def __init__(self, *, name: str, endpoint: str, bucket: str, access_key: str,
                 secret_key: str, region: str = "us-east-1", timeout_s: float = 5.0,
                 max_pool: int = 32) -> None:
        import boto3
        from botocore.config import Config

        self.name, self.endpoint, self.bucket = name, endpoint, bucket
        # What messages and listings show: userinfo in an endpoint is a credential (botocore
        # would send it nowhere useful), so it is never printed, nor its parts in botocore's
        # own messages.
        self.shown = redact_url(endpoint, keep_user=False)
        self._secrets = [*url_secrets(endpoint, with_user=True), secret_key]

        def client(wait_s: float, read_timeout: float) -> Any:
            cfg = Config(
                retries={"max_attempts": 2, "mode": "standard"},
                connect_timeout=wait_s, read_timeout=read_timeout,
                max_pool_connections=max_pool, s3={"addressing_style": "path"},
                # Our own hashes cover integrity end to end; skipping botocore's CRC of every
                # body halves the CPU spent per byte uploaded.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
            return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key,
                                aws_secret_access_key=secret_key, region_name=region,
                                config=cfg)

        # A request with a small answer (a manifest, a pointer, a listing, a HEAD) waits at
        # most `timeout_s` with its one retry (half each): a tier that accepts connections
        # and never answers is known down after that, and a reader asks it no more, so
        # every command that lists or reads manifests is bounded by it. Data transfers
        # (parts, ranged reads, big puts) keep a longer read timeout: a busy server may take
        # longer over a 16 MiB part than over a HEAD without being down.
        self.meta = client(timeout_s / 2, timeout_s / 2)
        self.client = client(timeout_s, max(timeout_s, 30.0))

    def describe(self) -> str:
        return f"s3:{self.shown}/{self.bucket}"

    def _redact(self, err: Exception) -> str:
        return redact(str(err), secrets=self._secrets)

    @_translate
    def check(self) -> None:
        self.meta.head_bucket(Bucket=self.bucket)

    @_translate
    def create_bucket(self) -> None:
        from botocore.exceptions import ClientError
        try:
            self.client.create_bucket(Bucket=self.bucket)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") not in (
                    "BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    @_translate
    def put(self, key: str, data: bytes | memoryview, *, if_absent: bool = False) -> str:
        body = bytes(data)
        # Content-MD5 makes the server refuse a body cut short: a client killed after sending
        # the headers (botocore sends the body in a second write) otherwise leaves an empty
        # object, and for a write-once manifest that empty object would stay forever.
        extra = {"ContentMD5": base64.b64encode(hashlib.md5(body).digest()).decode()}
        if if_absent:
            extra["IfNoneMatch"] = "*"
        c = self.client if len(body) > SMALL else self.meta
        r = c.put_object(Bucket=self.bucket, Key=key, Body=body, **extra)
        etag: str = r["ETag"].strip('"')  # boto3 is untyped; the ETag is a string
        return etag

    @_translate
    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        extra = {}
        c = self.meta  # a whole object: a manifest, a pointer, a part record
        if start or end is not None:
            extra["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
            c = self.client  # a chunk of data
        r = c.get_object(Bucket=self.bucket, Key=key, **extra)
        body: bytes = r["Body"].read()  # boto3 is untyped; a StreamingBody reads bytes
        return body

    @_translate
    def head(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError
        try:
            r = self.meta.head_object(Bucket=self.bucket, Key=key)
        except ClientError as err:
            if str(err.response.get("Error", {}).get("Code")) in _MISSING_CODES:
                return None
            raise
        return ObjectInfo(key, int(r["ContentLength"]), r["ETag"].strip('"'))

    @_translate
    def list(self, prefix: str) -> list[str]:
        out: list[str] = []
        for page in self.meta.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix):
            out.extend(o["Key"] for o in page.get("Contents", []))
        return sorted(out)

    @_translate
    def delete(self, key: str) -> None:
        self.meta.delete_object(Bucket=self.bucket, Key=key)

    @_translate
    def create_upload(self, key: str) -> str:
        r = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)
        upload_id: str = r["UploadId"]  # boto3 is untyped; the upload id is a string
        return upload_id

    @_translate
    def upload_part(self, key: str, upload_id: str, part_no: int,
                    data: bytes | memoryview) -> str:
        r = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                    PartNumber=part_no, Body=bytes(data))
        etag: str = r["ETag"].strip('"')  # boto3 is untyped; the ETag is a string
        return etag

    @_translate
    def list_parts(self, key: str, upload_id: str) -> dict[int, str]:
        out: dict[int, str] = {}
        for page in self.client.get_paginator("list_parts").paginate(
                Bucket=self.bucket, Key=key, UploadId=upload_id):
            for p in page.get("Parts", []):
                out[int(p["PartNumber"])] = p["ETag"].strip('"')
        return out

    @_translate
    def complete_upload(self, key: str, upload_id: str, parts: dict[int, str]) -> str:
        r = self.client.complete_multipart_upload(
            Bucket=self.bucket, Key=key, UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": f'"{e}"'}
                                       for n, e in sorted(parts.items())]})
        etag: str = r["ETag"].strip('"')  # boto3 is untyped; the ETag is a string
        return etag

    @_translate
    def abort_upload(self, key: str, upload_id: str) -> None:
        from botocore.exceptions import ClientError
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except ClientError as err:
            if str(err.response.get("Error", {}).get("Code")) not in _MISSING_CODES:
                raise

    @_translate
    def list_uploads(self, prefix: str) -> builtins.list[tuple[str, str]]:
        r = self.meta.list_multipart_uploads(Bucket=self.bucket, Prefix=prefix)
        return [(u["Key"], u["UploadId"]) for u in r.get("Uploads", [])]
