"""Member deployments: a group of trained models behind one Serve deployment.

The production layout gives every member its own deployment (a group of one), so each scales
on its own. Small clusters put several members in one deployment: the fan-out is then as
wide as the number of groups instead of the number of members (see member_layout).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, cast

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle, DeploymentResponse

from app.adapters.host_cpu import IdleCpu
from app.adapters.member_model import load_group
from app.adapters.model_store import local_version
from app.config.app_args import BatchingConfig, MemberGroupConfig
from app.config.knobs import explain
from app.contract.manifest import MemberEntry, Runtime, load_manifest
from app.core.load_meter import LoadMeter
from app.core.online.fanout import MemberRef
from app.serving.autoscaling import replica_stats
from app.serving.replica_process import prepare_replica_process

logger = logging.getLogger(__name__)


# Until reconfigure() applies the deployment's batching.
DEFAULT_MAX_BATCH_ROWS: int = BatchingConfig.model_fields["max_batch_rows"].default


def _rows(matrices: list[np.ndarray]) -> int:
    return sum(m.shape[0] for m in matrices)


@serve.deployment
class MemberGroupDeployment:
    """Thin Serve wrapper around MemberGroupModel; `@serve.batch` shares one predict per batch."""

    def __init__(
        self, entries: list[MemberEntry], version_dir: str, runtime: Runtime = "onnx"
    ) -> None:
        prepare_replica_process()
        self._names = [e.name for e in entries]
        folder = local_version(version_dir)  # a store URI: this node's cached copy
        self._group = load_group(entries, folder, runtime, load_manifest(folder).fidelity)
        self._delay_s = 0.0
        self._max_batch_rows = DEFAULT_MAX_BATCH_ROWS
        self._fault_counts: Counter[str] = Counter()
        # Share of time spent scoring (one batch at a time): what this deployment
        # autoscales on, whatever the number of calls that carried the rows.
        self._load = LoadMeter(1.0)
        self._idle = IdleCpu()

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Batching and fault injection, live. A config that does not validate is logged and
        refused (the replica keeps what it had): raising here would make Serve restart the
        replica with the same config, again and again. On the replica's event loop."""
        try:
            config = MemberGroupConfig.model_validate(user_config or {})
        except ValueError as exc:
            logger.error("refused member group config %r: %s", user_config, explain(exc))
            return
        batch: Any = self._score_batch  # @serve.batch adds these setters at run time
        batch.set_max_batch_size(config.batching.max_batch_rows)
        self._max_batch_rows = config.batching.max_batch_rows
        batch.set_batch_wait_timeout_s(config.batching.batch_wait_timeout_s)
        delays = config.faults.slow_members_ms
        self._delay_s = max((delays.get(n, 0.0) for n in self._names), default=0.0) / 1000.0

    async def score(self, matrix: np.ndarray) -> np.ndarray:
        """Shape (members, rows) for one candidate matrix."""
        if self._delay_s > 0:
            # Injected before batching, per request, so a caller's cancellation (deadline
            # spent, client gone) visibly cuts it short.
            self._fault_counts["delayed"] += 1
            try:
                await asyncio.sleep(self._delay_s)
            except asyncio.CancelledError:
                self._fault_counts["cancelled"] += 1
                raise
        limit = self._max_batch_rows
        if matrix.shape[0] <= limit:
            result: np.ndarray = await self._score_batch(matrix)
            return result
        # Serve's batching fails a call larger than the batch outright. A round can be: the
        # batch size is live here, the supervisors' round size live there, and a member's
        # user_config is given whole (a key left out takes its default). Scored in parts,
        # such a round costs several predicts instead of failing every login in it.
        parts = await asyncio.gather(
            *(self._score_batch(matrix[i : i + limit]) for i in range(0, matrix.shape[0], limit))
        )
        return np.concatenate(parts, axis=1)

    def fault_counts(self) -> dict[str, int]:
        """How often the injected delay ran and was cancelled (for chaos tests)."""
        return dict(self._fault_counts)

    # Batch size is counted in candidate rows, not calls: a predict on 1024 rows costs about
    # as much whether they come from 2 requests or 100.
    @serve.batch(
        max_batch_size=DEFAULT_MAX_BATCH_ROWS, batch_wait_timeout_s=0.0, batch_size_fn=_rows
    )
    async def _score_batch(self, matrices: list[np.ndarray]) -> list[np.ndarray]:
        # Off the replica's event loop: it keeps answering health checks and cancellations
        # while the batch is scored.
        self._load.enter()
        try:
            return await self._group.score_many_async(matrices)
        finally:
            self._load.exit()

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Serve's custom autoscaling metrics (app.serving.autoscaling)."""
        return replica_stats(self._load, self._idle)

    def __del__(self) -> None:
        # Serve calls this on graceful shutdown (the garbage collector may call it again).
        if hasattr(self, "_group"):
            self._group.close()


class HandleGroupClient:
    """MemberGroupClient over a Serve DeploymentHandle."""

    def __init__(
        self, name: str, handle: DeploymentHandle[Any], entries: list[MemberEntry]
    ) -> None:
        self.name = name
        self.members = tuple(MemberRef(e.name, e.weight) for e in entries)
        # With the service's process settings a handle call goes over Serve's gRPC
        # transport, which serializes both ways with cloudpickle unless told otherwise. The
        # hop carries a float32 matrix one way and a score matrix back: plain pickle costs
        # 0.93x the hop's CPU sequentially, 0.88x with 8 at once (loadtest.hop_cost
        # --serializations cloudpickle,pickle, docs/member-runtimes.md).
        self._handle = handle.options(
            request_serialization="pickle", response_serialization="pickle"
        )

    async def score(self, matrix: np.ndarray) -> np.ndarray:
        response = cast(DeploymentResponse[np.ndarray], self._handle.score.remote(matrix))
        try:
            result: np.ndarray = await response
        except asyncio.CancelledError:
            # Awaiting stopped (budget spent or client gone): cancel the request in Serve so
            # the replica does not keep working for nobody.
            response.cancel()  # type: ignore[no-untyped-call]
            raise
        return result
