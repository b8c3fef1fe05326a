"""Which trained version a run serves or scores, and where its artifacts are: the fields an
application's args (app.config.app_args) and a batch run's (app.config.batch_args) share."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from app.config.settings import get_settings
from app.config.strict import StrictModel
from app.contract.artifacts import version_dir
from app.contract.ids import GAME_PATTERN, PROFILE_PATTERN, VERSION_PATTERN


class VersionArgs(StrictModel):
    game: str = Field(pattern=GAME_PATTERN)
    version: str = Field(pattern=VERSION_PATTERN)
    profile: str = Field(default="standard", pattern=PROFILE_PATTERN)
    artifacts_root: Path | None = Field(
        default=None, description="folder holding <profile>/<game>/<version>; default from settings"
    )
    artifacts: str | None = Field(
        default=None,
        pattern=r"^s3://[^/]+(/.*)?$",
        description="the model store this version is published in (s3://bucket/prefix, "
        "`offers publish`): each node loads <prefix>/<game>/<version> through its cache, "
        "hashes checked before anything is loaded. Unset: the local artifacts_root.",
    )

    def version_dir(self) -> Path:
        root = self.artifacts_root or get_settings().artifacts_root
        return version_dir(root, self.profile, self.game, self.version).resolve()

    def version_source(self) -> str:
        """Where the version is loaded from: its store URI, or its local folder."""
        if self.artifacts:
            return f"{self.artifacts.rstrip('/')}/{self.game}/{self.version}"
        return str(self.version_dir())
