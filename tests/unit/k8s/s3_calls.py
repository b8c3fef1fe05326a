"""What S3 permissions a pyarrow filesystem user needs, without S3.

`RecordingS3` is a local folder standing in for `s3://<bucket>/<prefix>`: code that takes a
pyarrow filesystem runs against it unchanged, and every call is recorded as the S3 requests
pyarrow's S3FileSystem makes for it (measured against an S3 endpoint) and the IAM action
each needs:

- get_file_info(path): HeadObject (s3:GetObject) when the object exists; otherwise a 404
  (s3:ListBucket, evaluated with `s3:prefix` = the key) and a ListObjectsV2 of `key/`;
- get_file_info(FileSelector): ListObjectsV2 of `key/` (s3:ListBucket, `s3:prefix`);
- open_input_file/open_input_stream: HeadObject + GetObject (s3:GetObject);
- open_output_stream: a multipart upload (s3:PutObject; s3:AbortMultipartUpload on failure);
- move: CopyObject (s3:GetObject on the source, s3:PutObject on the target), DeleteObject of
  the source, then a PutObject of the source's parent "folder" marker;
- delete_file: DeleteObject, then the parent marker;
- create_dir: HeadBucket (s3:ListBucket without a prefix) and a folder marker for every
  level from the bucket root down.

`allows` evaluates an IAM policy for one such request (Allow statements, `*`/`?` wildcards in
resources, StringLike conditions; a condition key absent from the request fails).

`RecordingS3Client` is the same for boto3, as app.adapters.model_store calls it: a local
folder as one bucket, every call recorded as the requests IAM evaluates and answered as S3
answers a caller with a given policy (403 when refused, 404 for a missing key only to a
caller that may list it):

- get_object: GetObject (s3:GetObject); a missing key, s3:ListBucket with `s3:prefix` = the
  key, decides 404 or 403;
- download_file: HeadObject, then GetObject (s3:GetObject both);
- upload_file, put_object: s3:PutObject (a multipart upload's parts are PutObject too);
- list_objects_v2 (its paginator): s3:ListBucket with `s3:prefix` = the Prefix.
"""

from __future__ import annotations

import io
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
from botocore.exceptions import ClientError


@dataclass(frozen=True)
class S3Request:
    action: str
    resource: str  # an ARN
    prefix: str | None = None  # the request's s3:prefix, for ListBucket

    def __str__(self) -> str:
        return f"{self.action} {self.resource}" + (
            f" (s3:prefix={self.prefix!r})" if self.prefix is not None else ""
        )


def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."))


def allows(policy: dict[str, Any], request: S3Request) -> bool:
    for statement in policy["Statement"]:
        if statement["Effect"] != "Allow" or request.action not in statement["Action"]:
            continue
        if not any(_wildcard(r).fullmatch(request.resource) for r in statement["Resource"]):
            continue
        context = {} if request.prefix is None else {"s3:prefix": request.prefix}
        conditions = statement.get("Condition", {})
        assert set(conditions) <= {"StringLike"}, conditions
        if all(
            key in context and any(_wildcard(p).fullmatch(context[key]) for p in patterns)
            for key, patterns in conditions.get("StringLike", {}).items()
        ):
            return True
    return False


@dataclass
class RecordingS3(pafs.FileSystemHandler):
    """A local folder (`root`) as s3://<bucket>/<prefix>; `.filesystem` is the pyarrow one."""

    root: str
    bucket: str
    prefix: str
    requests: list[S3Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._local = pafs.LocalFileSystem()
        self.filesystem = pafs.PyFileSystem(self)

    # -- the S3 view of a local path
    def key(self, path: str) -> str:
        rel = os.path.relpath(path.rstrip("/"), self.root)
        assert not rel.startswith(".."), f"{path} is outside the output prefix"
        return self.prefix if rel == "." else f"{self.prefix}/{rel}"

    def _object(self, action: str, key: str) -> None:
        self.requests.append(S3Request(action, f"arn:aws:s3:::{self.bucket}/{key}"))

    def _list(self, prefix: str | None) -> None:
        self.requests.append(S3Request("s3:ListBucket", f"arn:aws:s3:::{self.bucket}", prefix))

    def _parent_marker(self, path: str) -> None:
        self._object("s3:PutObject", self.key(os.path.dirname(path.rstrip("/"))) + "/")

    # -- pyarrow's FileSystemHandler
    def get_type_name(self) -> str:
        return "recording-s3"

    def equals(self, other: Any) -> bool:
        return other is self

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        infos = self._local.get_file_info(paths)
        for path, info in zip(paths, infos, strict=True):
            key = self.key(path)
            if info.type == pafs.FileType.File:
                self._object("s3:GetObject", key)
            else:
                self._list(key)  # the 404 of HeadObject
                self._list(f"{key}/")
        return infos

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        self._list(f"{self.key(selector.base_dir)}/")
        return self._local.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self._list(None)  # HeadBucket
        parts = self.key(path).split("/")
        for depth in range(1, len(parts) + 1):
            self._object("s3:PutObject", "/".join(parts[:depth]) + "/")
        self._local.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self._object("s3:DeleteObject", self.key(path) + "/")
        self._local.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._object("s3:DeleteObject", self.key(path) + "/*")
        self._local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise AssertionError("never on an output prefix")

    def delete_file(self, path: str) -> None:
        self._object("s3:DeleteObject", self.key(path))
        self._parent_marker(path)
        self._local.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self._object("s3:GetObject", self.key(src))
        self._object("s3:PutObject", self.key(dest))
        self._object("s3:DeleteObject", self.key(src))
        self._parent_marker(src)
        self._local.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self._object("s3:GetObject", self.key(src))
        self._object("s3:PutObject", self.key(dest))
        self._local.copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        self._object("s3:GetObject", self.key(path))
        return self._local.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        self._object("s3:GetObject", self.key(path))
        return self._local.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        self._object("s3:PutObject", self.key(path))
        self._object("s3:AbortMultipartUpload", self.key(path))
        return self._local.open_output_stream(path)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        raise AssertionError("S3 has no append")


@dataclass
class RecordingS3Client:
    """A local folder (`root`) as the bucket `bucket`, for a caller whose identity policy is
    `policy` (None: every request allowed, as for the publisher that fills it)."""

    root: Path
    bucket: str
    policy: dict[str, Any] | None = None
    requests: list[S3Request] = field(default_factory=list)

    def _check(self, request: S3Request, operation: str) -> None:
        self.requests.append(request)
        if self.policy is not None and not allows(self.policy, request):
            raise _client_error(403, "AccessDenied", operation)

    def _object(self, bucket: str, key: str) -> Path:
        assert bucket == self.bucket, f"{bucket} is not the recorded bucket {self.bucket}"
        return self.root / key

    def _readable(self, bucket: str, key: str, operation: str) -> Path:
        self._check(S3Request("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}"), operation)
        path = self._object(bucket, key)
        if not path.is_file():
            self._check(S3Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", key), operation)
            raise _client_error(404, "NoSuchKey", operation)
        return path

    def _write(self, bucket: str, key: str, body: bytes, operation: str) -> None:
        self._check(S3Request("s3:PutObject", f"arn:aws:s3:::{bucket}/{key}"), operation)
        path = self._object(bucket, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)

    # -- boto3's S3 client, the calls the model store makes
    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        return {"Body": io.BytesIO(self._readable(Bucket, Key, "GetObject").read_bytes())}

    def download_file(self, bucket: str, key: str, filename: str) -> None:
        self._readable(bucket, key, "HeadObject")
        shutil.copyfile(self._readable(bucket, key, "GetObject"), filename)

    def upload_file(self, filename: str, bucket: str, key: str) -> None:
        self._write(bucket, key, Path(filename).read_bytes(), "PutObject")

    def put_object(self, *, Bucket: str, Key: str, Body: bytes) -> None:
        self._write(Bucket, Key, Body, "PutObject")

    def get_paginator(self, name: str) -> RecordingS3Client:
        assert name == "list_objects_v2", name
        return self

    def paginate(self, *, Bucket: str, Prefix: str) -> Iterator[dict[str, Any]]:
        self._check(S3Request("s3:ListBucket", f"arn:aws:s3:::{Bucket}", Prefix), "ListObjectsV2")
        found = sorted(p for p in self.root.rglob("*") if p.is_file())
        keys = [(str(p.relative_to(self.root)), p) for p in found]
        yield {
            "Contents": [
                {
                    "Key": key,
                    "Size": path.stat().st_size,
                    "LastModified": datetime.fromtimestamp(path.stat().st_mtime, UTC),
                }
                for key, path in keys
                if key.startswith(Prefix)
            ]
        }


def _client_error(status: int, code: str, operation: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )
