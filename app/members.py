"""Member deployments: one trained model behind a Serve deployment, scoring whole matrices."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.manifest import MemberEntry
from app.member_model import MemberModel


class BatchingConfig(BaseModel):
    """How a member coalesces concurrent score calls into one predict (runtime-tunable)."""

    max_batch_rows: int = Field(default=1024, ge=1, description="rows per predict call")
    batch_wait_timeout_s: float = Field(default=0.002, ge=0, le=1)


def _rows(matrices: list[np.ndarray]) -> int:
    return sum(m.shape[0] for m in matrices)


@serve.deployment
class MemberDeployment:
    """Thin Serve wrapper around MemberModel; `@serve.batch` shares one predict per batch."""

    def __init__(self, entry: MemberEntry, version_dir: str) -> None:
        self._model = MemberModel.load(entry, Path(version_dir))

    def reconfigure(self, user_config: dict) -> None:
        batching = BatchingConfig.model_validate(user_config or {})
        self.score.set_max_batch_size(batching.max_batch_rows)
        self.score.set_batch_wait_timeout_s(batching.batch_wait_timeout_s)

    # Batch size is counted in candidate rows, not calls: a predict on 1024 rows costs about
    # as much whether they come from 2 requests or 100.
    @serve.batch(max_batch_size=1024, batch_wait_timeout_s=0.002, batch_size_fn=_rows)
    async def score(self, matrices: list[np.ndarray]) -> list[np.ndarray]:
        return self._model.score_many(matrices)


class HandleMemberClient:
    """MemberClient over a Serve DeploymentHandle."""

    def __init__(self, handle: DeploymentHandle, entry: MemberEntry) -> None:
        self.name = entry.name
        self.weight = entry.weight
        self._handle = handle

    async def score(self, matrix: np.ndarray) -> np.ndarray:
        response = self._handle.score.remote(matrix)
        try:
            return await response
        except asyncio.CancelledError:
            # Awaiting stopped (budget spent or client gone): cancel the request in Serve so
            # the replica does not keep working for nobody.
            response.cancel()
            raise
