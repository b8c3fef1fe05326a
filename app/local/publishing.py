"""`offers publish` and `offers versions`: a trained version into the model store, and what
the store holds (app.adapters.model_store, named by OFFERS_MODEL_STORE_URI and, locally,
OFFERS_S3_ENDPOINT_URL)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.adapters.model_store import ModelStore, PublishedVersion
from app.contract.artifacts import version_dir
from app.local.s3_server import S3Server
from app.local.serve_config import ConfiguredApp, local_store

log = logging.getLogger(__name__)


def publish(store: ModelStore, root: Path, profile: str, game: str, version: str) -> str:
    """Publish the trained version at root/profile/game/version; one line saying what was
    done. Refused (VersionConflict) if the store holds that version with other contents."""
    folder = version_dir(root, profile, game, version)
    if not folder.is_dir():
        raise FileNotFoundError(f"no trained version at {folder}; run `offers train` first")
    uri, uploaded = store.publish(folder)
    return f"{'published' if uploaded else 'already published, identical:'} {uri}"


def versions_table(versions: list[PublishedVersion]) -> str:
    lines = [f"{'game':<18} {'version':<9} {'members':>7} {'AUC':>6} {'size':>9}  published"]
    for v in versions:
        lines.append(
            f"{v.game:<18} {v.version:<9} {v.members:>7} {v.auc:>6.3f} "
            f"{v.size_bytes / 1e6:>7.1f}MB  {v.published_at:%Y-%m-%d %H:%M:%S %Z}"
        )
    return "\n".join(lines)


def publish_served(apps: list[ConfiguredApp], server: S3Server) -> None:
    """Publish, into the local S3 server, the trained version of every app that loads from
    a model store (its bucket created if missing): what `make run` does before Serve starts,
    so the shipped config's `artifacts: s3://...` has something to load."""
    for app in apps:
        if not app.store_uri:
            continue
        store = ModelStore(server.client(timeout_s=30.0), app.store_uri)
        server.ensure_bucket(store.bucket)
        uri, uploaded = store.publish(app.version_dir())
        log.info("%s %s", "published" if uploaded else "already in the store:", uri)


@contextmanager
def local_model_store(apps: list[ConfiguredApp], log_path: Path) -> Iterator[S3Server | None]:
    """The local S3-protocol server the apps' `artifacts: s3://...` name, with their trained
    versions published into it; None (nothing started) when every app loads from a folder.
    It keeps its objects in memory, so each start publishes them again (the replicas' node
    cache checks its copy against the store's manifest: app.adapters.model_store)."""
    store = local_store(apps)
    if store is None:
        yield None
        return
    host, port = store
    with S3Server(port, host=host, log_path=log_path) as server:
        log.info("model store (S3 protocol) on %s (pid %s)", server.endpoint_url, server.pid)
        started = time.perf_counter()
        publish_served(apps, server)
        log.info("served versions in the model store (%.1fs)", time.perf_counter() - started)
        yield server
