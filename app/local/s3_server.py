"""The local S3-protocol server: moto's server mode (PyPI `moto[server]`), on a loopback port.

The model store (app.adapters.model_store) and the batch job's output reach it through the
same boto3 and pyarrow code paths as AWS S3, with only the endpoint changed. It keeps its
objects in memory: `make run` publishes the trained versions into it at every start (a
no-op for a version the store already holds identically).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from app.local.processes import (
    LOCAL_CREDENTIALS,
    ChildProcess,
    Managed,
    ProcessFailed,
    port_is_free,
)


class S3ServerError(RuntimeError):
    pass


def local_s3_client(endpoint_url: str, timeout_s: float = 5.0) -> Any:
    """An S3 client for a local endpoint: dummy credentials, path-style addressing."""
    config = Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"max_attempts": 1},  # the model store retries with its own backoff
        s3={"addressing_style": "path"},
    )
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, region_name="us-east-1", config=config,
        **LOCAL_CREDENTIALS,
    )  # fmt: skip


class S3Server(Managed):
    """A moto server child process; use as a context manager so it is always stopped."""

    def __init__(self, port: int, *, host: str = "127.0.0.1", log_path: Path | None = None):
        self.host = host
        self.port = port
        self.log_path = log_path
        self._child: ChildProcess | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    def client(self, timeout_s: float = 5.0) -> Any:
        return local_s3_client(self.endpoint_url, timeout_s)

    def start(self, timeout_s: float = 60.0) -> S3Server:
        if not port_is_free(self.host, self.port):
            raise S3ServerError(f"port {self.host}:{self.port} is already in use")
        args = [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]
        self._child = ChildProcess(args, log_path=self.log_path, name="moto-s3").start()
        client = self.client(timeout_s=1.0)

        def answers() -> bool:
            try:
                client.list_buckets()
                return True
            except (BotoCoreError, ClientError):
                return False

        try:
            self._child.wait_ready(answers, timeout_s)
        except ProcessFailed as exc:
            self._child = None
            raise S3ServerError(str(exc)) from exc
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
