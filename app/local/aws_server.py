"""A local server of an AWS wire protocol (dynalite for DynamoDB, moto for S3) as a child
process on a loopback port: started, ready once a real client call answers, always stopped."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from app.local.processes import ChildProcess, Managed, ProcessFailed, port_is_free


class LocalAwsServer(Managed):
    """The child process, its endpoint and its readiness; subclasses give the command, the
    client and the call that proves the server answers."""

    name = "aws-server"
    error: type[RuntimeError] = RuntimeError

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
        raise NotImplementedError

    def probe(self, client: Any) -> None:
        """One cheap call, which raises until the server answers."""
        raise NotImplementedError

    def check_port(self) -> None:
        if not port_is_free(self.host, self.port):
            raise self.error(f"port {self.host}:{self.port} is already in use")

    def launch(self, args: Sequence[str], timeout_s: float) -> None:
        """Start `args` and wait until the probe answers (self.error if it never does)."""
        self._child = ChildProcess(args, log_path=self.log_path, name=self.name).start()
        client = self.client(timeout_s=1.0)

        def answers() -> bool:
            try:
                self.probe(client)
                return True
            except (BotoCoreError, ClientError):
                return False

        try:
            self._child.wait_ready(answers, timeout_s)
        except ProcessFailed as exc:
            self._child = None
            raise self.error(str(exc)) from exc
