"""The typed options of a batch run (app.batch): what to score, how fast to read, how wide
to score. The CLI (`offers-batch`, `make batch`) and the k8s RayJob both fill this model."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import ConfigDict, Field, model_validator

from app.config.settings import get_settings
from app.config.version_args import VersionArgs
from app.contract.manifest import Runtime


class BatchJobArgs(VersionArgs):
    model_config = ConfigDict(extra="forbid", frozen=True)

    output_uri: str | None = Field(
        default=None, description="local folder or s3:// URI; default settings' batch_output_uri"
    )
    # One read task per Scan segment. DynamoDB serves segments in parallel; more segments
    # than read slots only queue.
    segments: int = Field(default=4, ge=1, le=1_000_000)
    # The whole run's read budget, shared evenly by the segments (which all run at once:
    # read tasks reserve read_num_cpus each). Units: items scanned, or read capacity units
    # when the table reports consumed capacity (AWS does; otherwise items are charged).
    read_budget_per_s: float = Field(default=5000.0, gt=0)
    read_budget_unit: Literal["items", "read_units"] = "items"
    read_num_cpus: float = Field(default=0.25, gt=0)
    # Players per scoring call: the candidate matrix is batch_size x offers rows, one
    # predict per member.
    batch_size: int = Field(default=2048, ge=1)
    # The scoring actor pool: each actor loads every member once. max None: as many as the
    # cluster's CPUs hold at actor_num_cpus each.
    min_actors: int = Field(default=1, ge=1)
    max_actors: int | None = Field(default=None, ge=1)
    actor_num_cpus: float = Field(default=1.0, gt=0)
    # How members score (as an application's `runtime`): the compiled graphs, or native.
    runtime: Runtime = "onnx"
    # Rows per Parquet file at least (the last file of a run may hold fewer).
    min_rows_per_file: int = Field(default=100_000, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max_actors is not None and self.min_actors > self.max_actors:
            raise ValueError(f"min_actors {self.min_actors} exceeds max_actors {self.max_actors}")
        return self

    def output_root(self) -> str:
        return self.output_uri or get_settings().batch_output_uri
