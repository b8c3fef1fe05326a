"""Process settings: the only place that reads the environment (prefix OFFERS_).

Only infrastructure lives here (where DynamoDB is, how long to wait for it, where artifacts
are); training, seeding and the replicas all get it from here. What a Serve application
serves (game, version, members, replicas) is in the typed builder args
(app.config.app_args) instead.
"""

from __future__ import annotations

import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, HttpUrl, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_artifacts_root() -> Path:
    # models/artifacts inside the checkout; production images point OFFERS_ARTIFACTS_ROOT at
    # the folder the artifacts were baked into or synced to. Training writes there too.
    return Path(__file__).resolve().parents[2] / "models" / "artifacts"


def _default_model_cache_dir() -> Path:
    # Node-local and shared by every replica of the node (and every checkout on it).
    return Path(tempfile.gettempdir()) / "offers-model-cache"


def _default_batch_output_uri() -> str:
    # .local/batch inside the checkout (git-ignored), beside dynalite's data.
    return str(Path(__file__).resolve().parents[2] / ".local" / "batch")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OFFERS_", extra="ignore", frozen=True)

    # None means "the real AWS endpoint for the region" via the standard credential chain.
    # Local runs point this at dynalite; nothing else differs between local and AWS.
    dynamodb_endpoint_url: HttpUrl | None = None
    aws_region: str = "us-east-1"
    dynamodb_table: str = Field(default="player-features", min_length=3, max_length=255)
    # botocore owns timeouts and retries; these bound one GetItem to well inside the SLA.
    dynamodb_connect_timeout_s: float = Field(default=0.25, gt=0)
    dynamodb_read_timeout_s: float = Field(default=0.25, gt=0)
    dynamodb_max_attempts: int = Field(default=2, ge=1, le=10)
    dynamodb_max_pool_connections: int = Field(default=32, ge=1)
    # Logins that arrive while reads are in flight share one BatchGetItem (up to 100 keys)
    # instead of one GetItem each; at most this many batches run at once.
    dynamodb_batch_reads: bool = True
    dynamodb_max_batches_in_flight: int = Field(default=4, ge=1, le=64)
    # Features change when the offline pipeline rewrites them, not between two logins a few
    # seconds apart: known players' items are kept this long (0 disables the cache).
    feature_cache_ttl_s: float = Field(default=30.0, ge=0, le=3600)
    feature_cache_max_players: int = Field(default=100_000, ge=1)

    # A table that keeps failing is not hammered: after this many failed reads in a row the
    # breaker opens and logins get the flagged fallback at once, until one trial read after
    # the reset timeout succeeds.
    dynamodb_breaker_fail_max: int = Field(default=5, ge=1)
    dynamodb_breaker_reset_timeout_s: float = Field(default=5.0, gt=0)

    # Callers authenticate with the X-API-Key header when this is set: the hex SHA-256 of
    # the key (never the key itself), e.g. from a Kubernetes secret. Unset: no auth.
    api_key_sha256: SecretStr | None = None
    # The same digest read from a file: a Kubernetes Secret mounted as a volume (k8s/), so
    # it is in no pod spec and no process environment. Set one of the two, not both.
    api_key_sha256_file: Path | None = None

    # Every thread of a replica (supervisor, member group, router) runs at least this nice
    # (app.adapters.cpu_priority): HAProxy and a replica's Python threads run at Ray's 15,
    # its gRPC and Ray threads at 0; at 19 the replicas give way to the edge's refusals when
    # a burst finds the cores busy scoring. 0 leaves every thread as Ray started it.
    replica_niceness: int = Field(default=19, ge=0, le=19)
    # The node's raylet, the parent of every Ray worker, runs at least this nice once a
    # replica started there (app.adapters.cpu_priority.raylet_gives_way), and so does each
    # worker it starts until the worker's own code runs: a replacement replica's first
    # CPU-second then weighs 2.4 times a serving replica's thread instead of 68. Ray's own
    # worker niceness (15): above it, Ray's workers could not go back down to theirs.
    # 0 leaves the raylet as Ray started it.
    raylet_niceness: int = Field(default=15, ge=0, le=15)

    artifacts_root: Path = Field(default_factory=_default_artifacts_root)
    # The model store (app.adapters.model_store): published versions under
    # s3://<bucket>/<prefix>/<game>/<version>/. `offers publish` writes there, `offers
    # versions` lists it. None: no store configured.
    model_store_uri: str | None = Field(default=None, pattern=r"^s3://[^/]+(/.*)?$")
    # None: AWS S3 for the region (standard credential chain). Local runs point this at the
    # S3-protocol server `make run` starts (app.local.s3_server).
    s3_endpoint_url: HttpUrl | None = None
    # Where a node keeps the versions its replicas load from the store, shared by them: one
    # download per node, hashes checked before anything is loaded.
    model_cache_dir: Path = Field(default_factory=_default_model_cache_dir)
    # Where the batch job (app.batch) writes its runs, and where supervisors look for the
    # newest precomputed-offers snapshot of their version: a local folder or an s3:// URI
    # (read and written through pyarrow's filesystems).
    batch_output_uri: str = Field(default_factory=_default_batch_output_uri, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _digest_from_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("api_key_sha256_file") is None:
            return data
        if data.get("api_key_sha256") is not None:
            raise ValueError("set api_key_sha256 or api_key_sha256_file, not both")
        path = Path(data["api_key_sha256_file"])
        try:
            digest = path.read_text().strip()
        except OSError as exc:
            # A replica configured for auth must not start without it (and serve unauthenticated).
            raise ValueError(f"api_key_sha256_file {path}: {exc.strerror}") from exc
        return {**data, "api_key_sha256": digest}

    @field_validator("api_key_sha256")
    @classmethod
    def _hex_digest(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value.get_secret_value()):
            raise ValueError("api_key_sha256 must be 64 lowercase hex characters")
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use (never at import)."""
    return Settings()
