"""`offers publish` and `offers versions`: a trained version into the model store, and what
the store holds (app.adapters.model_store, named by OFFERS_MODEL_STORE_URI and, locally,
OFFERS_S3_ENDPOINT_URL)."""

from __future__ import annotations

from pathlib import Path

from app.adapters.model_store import ModelStore, PublishedVersion
from app.contract.artifacts import version_dir


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
