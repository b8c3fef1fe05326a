"""The model store: published ensemble versions on the S3 protocol, and the node cache the
replicas load them from.

A published version is `s3://<bucket>/<prefix>/<game>/<version>/`: its artifacts, then its
manifest, written last, so a version is published exactly when its manifest is there. Once
published it is immutable: publishing the same game and version again is a no-op when the
manifest is byte-identical (it names every artifact's sha256, so the files are the same), and
refused otherwise.

Replicas never load from the store directly. `materialize` copies a version into a folder of
the node (`<cache>/<game>/<version>/`) once, under a file lock its replicas share, checks
every artifact's sha256 against the manifest before anything is loaded, and returns the
folder; the loaders then read it as they read a trained version. A complete copy in the node
cache serves when the store's manifest matches it or the store does not answer, so a store
that is down does not stop a node that has the version; without one, the store is retried
with backoff and then reported down.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from app.contract.artifacts import ArtifactIntegrityError, verify_file
from app.contract.manifest import MANIFEST_FILENAME, Manifest, load_manifest

logger = logging.getLogger(__name__)

SCHEME = "s3://"
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0)  # then the store is reported down


class StoreUnavailable(RuntimeError):
    """The store did not answer, after the retries, and no node cache could stand in."""


class VersionConflict(RuntimeError):
    """The version is published with other contents: published versions never change."""


@dataclass(frozen=True)
class PublishedVersion:
    game: str
    version: str
    members: int
    auc: float  # the ensemble's, on the version's held-out impressions
    size_bytes: int
    published_at: datetime


def is_store_uri(value: str) -> bool:
    return value.startswith(SCHEME)


def files_of(manifest: Manifest) -> list[tuple[str, str]]:
    """(file name, sha256) of every artifact a manifest names: native and compiled. A name
    that would leave the version's folder (absolute, `..`) is refused: a manifest read from
    the store decides where its files are written."""
    files = []
    for entry in manifest.members:
        files.append((entry.artifact, entry.sha256))
        if entry.serving is not None:
            files.append((entry.serving.artifact, entry.serving.sha256))
    for name, _ in files:
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
            raise ArtifactIntegrityError(f"artifact name {name!r} leaves the version's folder")
    return files


class ModelStore:
    """Published versions under one bucket and prefix, through a boto3 S3 client."""

    def __init__(
        self,
        client: Any,
        uri: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urlsplit(uri)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError(f"a model store is an s3://bucket[/prefix] URI, got {uri!r}")
        self._client = client
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        self.uri = uri.rstrip("/")
        self._sleep = sleep

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def version_uri(self, game: str, version: str) -> str:
        return f"{SCHEME}{self.bucket}/{self._key(game, version)}"

    # --- publishing ---------------------------------------------------------------------

    def publish(self, folder: Path) -> tuple[str, bool]:
        """Upload a trained version (its manifest's game and version): (its URI, whether it
        was uploaded now; False: already published, identical). Every artifact's sha256 is
        checked against the manifest first, so a broken version is never published."""
        manifest = load_manifest(folder)
        for name, sha256 in files_of(manifest):
            verify_file(folder / name, sha256, name)
        local = (folder / MANIFEST_FILENAME).read_bytes()
        uri = self.version_uri(manifest.game, manifest.version)
        published = self._get_or_none(self._key(manifest.game, manifest.version, MANIFEST_FILENAME))
        if published is not None:
            if _digest(published) == _digest(local):
                return uri, False
            raise VersionConflict(
                f"{uri} is already published with another manifest (sha256 "
                f"{_digest(published)}, this one {_digest(local)}); a published version "
                "never changes: publish it under a new version"
            )
        for name, _ in files_of(manifest):
            self._client.upload_file(
                str(folder / name), self.bucket, self._key(manifest.game, manifest.version, name)
            )
        # Last: a version is published once its manifest is there.
        self._client.put_object(
            Bucket=self.bucket,
            Key=self._key(manifest.game, manifest.version, MANIFEST_FILENAME),
            Body=local,
        )
        return uri, True

    def versions(self) -> list[PublishedVersion]:
        """Every published version: game, version, members, AUC, size, when published."""
        found = []
        for key, modified in self._list(self._key()):
            parts = key[len(self._key()) :].strip("/").split("/")
            if len(parts) != 3 or parts[2] != MANIFEST_FILENAME:
                continue
            manifest = Manifest.model_validate_json(self._client.get_object(
                Bucket=self.bucket, Key=key)["Body"].read())  # fmt: skip
            sizes = dict(self._list(self._key(parts[0], parts[1]), size=True))
            found.append(
                PublishedVersion(
                    game=manifest.game,
                    version=manifest.version,
                    members=len(manifest.members),
                    auc=manifest.ensemble_auc,
                    size_bytes=int(sum(sizes.values())),
                    published_at=modified,
                )
            )
        return sorted(found, key=lambda v: (v.game, v.version))

    # --- loading ------------------------------------------------------------------------

    def cache_folder(self, game: str, version: str, cache_root: Path) -> Path:
        """Where this store's copy of a version lives on the node: keyed by the store too,
        so two stores' versions of one name never share a folder."""
        return cache_root / _digest(self.uri.encode())[:12] / game / version

    def materialize(self, game: str, version: str, cache_root: Path) -> Path:
        """The version's folder in the node cache, complete and verified. Every replica of
        the node may call this at once: one copies, the others wait on the lock and find it.

        The store is the authority: a complete copy in the cache serves when the store's
        manifest is the same (one GET), or when the store does not answer that one try (no
        backoff: a node that has the version starts without waiting for a store that is
        down). A store that answers with another manifest replaces the copy: a store can
        be emptied and filled again (the local one keeps its objects in memory), and a
        version published again after that may hold other bits."""
        folder = self.cache_folder(game, version, cache_root)
        folder.parent.mkdir(parents=True, exist_ok=True)
        manifest_key = self._key(game, version, MANIFEST_FILENAME)
        where = f"{self.version_uri(game, version)}/{MANIFEST_FILENAME}"
        with _locked(folder.parent / f".{version}.lock"):
            manifest_bytes: bytes | None
            if cached(folder):
                try:
                    manifest_bytes = self._with_retries(
                        lambda: self._get(manifest_key), where, delays=()
                    )
                except StoreUnavailable as exc:
                    logger.warning("model store down (%s): serving the node cache's copy", exc)
                    _check_identity(folder, game, version)
                    return folder
                if manifest_bytes == (folder / MANIFEST_FILENAME).read_bytes():
                    _check_identity(folder, game, version)
                    return folder
                if manifest_bytes is not None:
                    logger.warning(
                        "%s: the node cache held another copy (manifest sha256 %s, the "
                        "store's %s); copying the store's",
                        self.version_uri(game, version),
                        _digest((folder / MANIFEST_FILENAME).read_bytes()),
                        _digest(manifest_bytes),
                    )
            else:
                manifest_bytes = self._with_retries(lambda: self._get(manifest_key), where)
            if manifest_bytes is None:
                raise FileNotFoundError(f"{self.version_uri(game, version)} is not published")
            self._download(game, version, manifest_bytes, folder)
            _check_identity(folder, game, version)
            return folder

    def _download(self, game: str, version: str, manifest_bytes: bytes, folder: Path) -> None:
        manifest = Manifest.model_validate_json(manifest_bytes)
        staging = folder.with_name(f".{folder.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            for name, sha256 in files_of(manifest):
                target = staging / name
                target.parent.mkdir(parents=True, exist_ok=True)
                key = self._key(game, version, name)
                self._with_retries(
                    partial(self._client.download_file, self.bucket, key, str(target)),
                    f"{SCHEME}{self.bucket}/{key}",
                )
                verify_file(target, sha256, f"{self.version_uri(game, version)}/{name}")
            (staging / MANIFEST_FILENAME).write_bytes(manifest_bytes)  # last, as in the store
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)

    # --- S3 -----------------------------------------------------------------------------

    def _with_retries(
        self, call: Callable[[], Any], what: str, delays: tuple[float, ...] = RETRY_DELAYS_S
    ) -> Any:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        last: Exception | None = None
        for delay in (*delays, None):
            try:
                return call()
            except ClientError as exc:
                if _status(exc) < 500 and _status(exc) != 429:
                    raise
                last = exc
            # The endpoint did not answer, or a transfer broke off (boto3's own errors).
            except (BotoCoreError, Boto3Error) as exc:
                last = exc
            if delay is not None:
                logger.warning("model store: %s failed (%s); retrying in %.1f s", what, last, delay)
                self._sleep(delay)
        raise StoreUnavailable(f"the model store did not answer for {what}: {last}")

    def _get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            body: bytes = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if _status(exc) == 404:
                return None
            raise
        return body

    def _get_or_none(self, key: str) -> bytes | None:
        result: bytes | None = self._with_retries(lambda: self._get(key), f"{SCHEME}{key}")
        return result

    def _list(self, prefix: str, size: bool = False) -> Iterator[tuple[str, Any]]:
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{prefix}/" if prefix else ""):
            for item in page.get("Contents", []):
                yield item["Key"], item["Size"] if size else item["LastModified"]


def cached(folder: Path) -> bool:
    """Whether the node cache holds the version whole, every artifact matching its manifest."""
    if not (folder / MANIFEST_FILENAME).is_file():
        return False
    try:
        manifest = load_manifest(folder)
        for name, sha256 in files_of(manifest):
            verify_file(folder / name, sha256, name)
    except (ArtifactIntegrityError, ValueError, OSError):
        return False
    return True


def _check_identity(folder: Path, game: str, version: str) -> None:
    manifest = load_manifest(folder)
    if (manifest.game, manifest.version) != (game, version):
        raise ArtifactIntegrityError(
            f"{folder} holds {manifest.game}/{manifest.version}, not {game}/{version}"
        )


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _status(exc: Any) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500))


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def store_client(endpoint_url: str | None, region: str, timeout_s: float = 10.0) -> Any:
    """boto3's S3 client for the store: AWS for the region (standard credential chain), or a
    local S3-protocol endpoint (path-style addressing, as such servers expect)."""
    from botocore.config import Config

    from app.adapters.aws_session import new_session

    config = Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        # One call each (botocore's max_attempts would count retries): the store retries
        # with its own backoff.
        retries={"total_max_attempts": 1},
        s3={"addressing_style": "path"} if endpoint_url else {},
    )
    return new_session().client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


def store_of(settings: Any) -> ModelStore:
    """The model store the settings name (OFFERS_MODEL_STORE_URI, OFFERS_S3_ENDPOINT_URL)."""
    if not settings.model_store_uri:
        raise ValueError("no model store configured: set OFFERS_MODEL_STORE_URI=s3://bucket/prefix")
    endpoint = str(settings.s3_endpoint_url) if settings.s3_endpoint_url else None
    return ModelStore(store_client(endpoint, settings.aws_region), settings.model_store_uri)


def local_version(source: str, settings: Any | None = None) -> Path:
    """A version's folder on this node: `source` itself when it is a folder, else its copy
    in the node cache (`s3://bucket/prefix/<game>/<version>`, materialized)."""
    if not is_store_uri(source):
        return Path(source)
    if settings is None:
        from app.config.settings import get_settings

        settings = get_settings()
    base, game, version = source.rstrip("/").rsplit("/", 2)
    endpoint = str(settings.s3_endpoint_url) if settings.s3_endpoint_url else None
    store = ModelStore(store_client(endpoint, settings.aws_region), base)
    return store.materialize(game, version, Path(settings.model_cache_dir))
