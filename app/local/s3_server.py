"""The local S3-protocol server: moto's server mode (PyPI `moto[server]`), on a loopback port.

The model store (app.adapters.model_store) and the batch job's output reach it through the
same boto3 and pyarrow code paths as AWS S3, with only the endpoint changed. It keeps its
objects in memory: `make run` publishes the trained versions into it at every start (a
no-op for a version the store already holds identically).
"""

from __future__ import annotations

import sys
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError

from app.adapters.aws_session import new_session
from app.local.aws_server import LocalAwsServer
from app.local.processes import LOCAL_CREDENTIALS


class S3ServerError(RuntimeError):
    pass


def local_s3_client(endpoint_url: str, timeout_s: float = 5.0) -> Any:
    """An S3 client for a local endpoint: dummy credentials, path-style addressing."""
    config = Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"total_max_attempts": 1},  # one call: the store retries with its backoff
        s3={"addressing_style": "path"},
    )
    return new_session().client(
        "s3", endpoint_url=endpoint_url, region_name="us-east-1", config=config,
        **LOCAL_CREDENTIALS,
    )  # fmt: skip


class S3Server(LocalAwsServer):
    """A moto server child process; use as a context manager so it is always stopped."""

    name = "moto-s3"
    error = S3ServerError

    def client(self, timeout_s: float = 5.0) -> Any:
        return local_s3_client(self.endpoint_url, timeout_s)

    def probe(self, client: Any) -> None:
        client.list_buckets()

    def start(self, timeout_s: float = 60.0) -> S3Server:
        self.check_port()
        self.launch(
            [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)], timeout_s
        )
        return self

    def ensure_bucket(self, bucket: str) -> None:
        client = self.client()
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError:
            client.create_bucket(Bucket=bucket)

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.stop()
