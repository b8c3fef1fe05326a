"""The production profile: what a Kubernetes deployment needs beyond serve_config.yaml.

k8s/profile.yaml is this model, typed; every section forbids unknown keys so a misspelt
setting fails `make k8s` instead of vanishing. The serve overrides (`serve.ensemble_args`,
`serve.router_args`) are partial `args:` deep-merged onto every ensemble and router
application of serve_config.yaml, then validated as the full args the replicas will parse.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Self

import yaml
from pydantic import Field, field_validator, model_validator

from app.config.strict import FrozenModel

# KubeRay names the RayCluster `<rayservice>-<5 chars>`, and a RayCluster name is at most 53
# characters (ray-operator/controllers/ray/utils/constant.go): RayService names stop at 47.
MAX_RAYSERVICE_NAME = 47
DNS_1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
IAM_ROLE_NAME = r"^[A-Za-z0-9+=,.@_-]{1,64}$"
# s3://<bucket>/<prefix>: a bucket name as S3 allows it (no dots: virtual-hosted TLS), and a
# prefix of plain path segments. No IAM wildcard (`*`, `?`) or policy variable (`$`) can
# reach the policies' resource ARNs, and no segment is `.` or `..`.
S3_OUTPUT_URI = re.compile(
    r"^s3://(?P<bucket>[a-z0-9][a-z0-9-]{1,61}[a-z0-9])"
    r"/(?P<prefix>[A-Za-z0-9_=-][A-Za-z0-9._=-]*(/[A-Za-z0-9_=-][A-Za-z0-9._=-]*)*)$"
)
# The args that say where an ensemble application loads its version from: production sets
# them from `model_store` (app.k8s.serve_config), so the overrides may not.
STORE_ARGS = ("artifacts", "artifacts_root")


def s3_uri(value: str, setting: str) -> str:
    if not S3_OUTPUT_URI.fullmatch(value):
        raise ValueError(
            f"{setting} must be s3://<bucket>/<prefix> (a prefix of plain path segments, no "
            "trailing slash, no `*`, `?` or `$`)"
        )
    return value


def s3_bucket(uri: str) -> str:
    match = S3_OUTPUT_URI.fullmatch(uri)
    assert match is not None  # validated
    return match["bucket"]


def s3_prefix(uri: str) -> str:
    match = S3_OUTPUT_URI.fullmatch(uri)
    assert match is not None  # validated
    return match["prefix"]


def s3_overlap(a: str, b: str) -> bool:
    """Whether two validated s3://<bucket>/<prefix> URIs share objects: the same bucket, and
    one prefix is the other or a folder of it."""
    if s3_bucket(a) != s3_bucket(b):
        return False
    pa, pb = s3_prefix(a).split("/"), s3_prefix(b).split("/")
    return pa[: len(pb)] == pb or pb[: len(pa)] == pa


class ImageProfile(FrozenModel):
    # The tag is not set here: it is derived from the pins and the sources the image installs
    # (app.k8s.rayservice.image_tag), so the image and the cluster's rayVersion cannot drift
    # apart. The image holds no model: a new ensemble version is not a new tag.
    repository: str = Field(pattern=r"^[a-z0-9][a-z0-9.:/_-]*[a-z0-9]$")
    pull_policy: str = Field(default="IfNotPresent", pattern=r"^(Always|IfNotPresent|Never)$")


class AwsProfile(FrozenModel):
    account_id: str = Field(pattern=r"^[0-9]{12}$")
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]$")
    # The cluster's IRSA OIDC provider (`aws eks describe-cluster ... identity.oidc.issuer`,
    # without https://): the serve role trusts tokens from it for one ServiceAccount only.
    eks_oidc_provider: str = Field(pattern=r"^oidc\.eks\.[a-z0-9-]+\.amazonaws\.com/id/[A-Z0-9]+$")
    serve_role_name: str = Field(pattern=IAM_ROLE_NAME)

    def serve_role_arn(self) -> str:
        return self.role_arn(self.serve_role_name)

    def role_arn(self, name: str) -> str:
        return f"arn:aws:iam::{self.account_id}:role/{name}"


class DynamoDbProfile(FrozenModel):
    table: str = Field(pattern=r"^[A-Za-z0-9_.-]{3,255}$")


class HeadProfile(FrozenModel):
    """The head pod: GCS, dashboard, Serve controller, autoscaler. No replicas (num-cpus 0)."""

    cpu: float = Field(gt=0)
    memory_gib: float = Field(gt=0)


class WorkerGroupProfile(FrozenModel):
    """The CPU worker group: every replica runs here, nodes added by the Ray autoscaler."""

    name: str = Field(pattern=DNS_1123_LABEL)
    cpu: float = Field(gt=0)
    memory_gib: float = Field(gt=0)
    min_replicas: int = Field(ge=0)
    max_replicas: int = Field(ge=1)
    # Plasma store per pod (/dev/shm); Serve passes requests and answers by value, so small.
    object_store_gib: float = Field(gt=0)
    # Raylet, dashboard agent, HAProxy and its manager, log monitor: memory Ray does not
    # schedule replicas into.
    system_reserved_gib: float = Field(ge=0)
    # A node the autoscaler added is removed after this long without replicas.
    idle_timeout_s: int = Field(ge=0)

    def schedulable_memory_gib(self) -> float:
        return self.memory_gib - self.object_store_gib - self.system_reserved_gib


class ServeOverrides(FrozenModel):
    """What production changes in serve_config.yaml (README, Deploy to Kubernetes)."""

    # Serve's HAProxy on every node, listening on the pod's interfaces: the head is kept out
    # of the Serve service (it runs no replicas) and KubeRay's worker readiness probe asks
    # :8000/-/healthz, so any other choice leaves the service without endpoints.
    proxy_location: Literal["EveryNode"]
    http_host: Literal["0.0.0.0"]
    log_encoding: str = Field(pattern=r"^(TEXT|JSON)$")
    ensemble_args: dict[str, Any] = Field(default_factory=dict)
    router_args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("ensemble_args")
    @classmethod
    def _no_store(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Where versions load from is `model_store.uri`, the one store the serve role reads.
        named = [key for key in STORE_ARGS if key in value]
        if named:
            raise ValueError(f"serve.ensemble_args sets {named}: the store is model_store.uri")
        return value


class ModelStoreProfile(FrozenModel):
    """The model store the cluster loads ensemble versions from (app.adapters.model_store):
    `offers publish` puts a version under `<uri>/<game>/<version>/`, and every ensemble
    application's `args.artifacts`, and every batch RayJob's `--artifacts`, is this URI in
    production."""

    # s3://<bucket>/<prefix>: the serve and batch roles read only under the prefix.
    uri: str
    # The node cache on every Ray pod, the RayService's and the batch RayJobs'
    # (OFFERS_MODEL_CACHE_DIR, an emptyDir): the versions the pod's replicas (or scoring
    # actors) loaded, never evicted while the pod lives. Past the limit the kubelet evicts
    # the pod, and its replacement fetches only what is served then.
    cache_gib: float = Field(gt=0)

    @field_validator("uri")
    @classmethod
    def _s3_uri(cls, value: str) -> str:
        return s3_uri(value, "model_store.uri")

    def bucket(self) -> str:
        return s3_bucket(self.uri)

    def prefix(self) -> str:
        return s3_prefix(self.uri)


class LoadTestProfile(FrozenModel):
    """The in-cluster locust Job (k8s/loadtest/job.yaml)."""

    users: int = Field(ge=1)
    spawn_rate: float = Field(gt=0)
    run_time: str = Field(pattern=r"^[0-9]+[smh]$")
    user_rps: float = Field(gt=0)
    players: int = Field(ge=1)
    route_prefix: str = Field(pattern=r"^/[a-z0-9/_-]*$")
    api_key_secret: str = Field(pattern=DNS_1123_LABEL)


class BatchWorkersProfile(FrozenModel):
    """The batch job's worker group: a fixed number of pods (no autoscaler), for the Scan's
    read tasks and the scoring actors."""

    name: str = Field(pattern=DNS_1123_LABEL)
    replicas: int = Field(ge=1)
    cpu: float = Field(gt=0)
    memory_gib: float = Field(gt=0)
    # Plasma store per pod (/dev/shm): Ray Data streams the Scan's blocks and the scored
    # rows through it.
    object_store_gib: float = Field(gt=0)


class BatchJobKnobs(FrozenModel):
    """The options of `python -m app.batch` the RayJobs pass (app.config.batch_args)."""

    segments: int = Field(ge=1)
    # What every batch job together may read from the feature table per second: the jobs
    # `kubectl apply -k k8s/batch` starts run at once, so each gets an equal share.
    table_read_budget_per_s: float = Field(gt=0)
    read_budget_unit: Literal["items", "read_units"]
    batch_size: int = Field(ge=1)
    min_actors: int = Field(ge=1)
    max_actors: int = Field(ge=1)
    actor_num_cpus: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min_actors > self.max_actors:
            raise ValueError("batch.job.min_actors exceeds batch.job.max_actors")
        return self


class BatchProfile(FrozenModel):
    """The offline batch-scoring RayJobs (k8s/batch/) and their IAM role."""

    # Where runs are written (`<uri>/game=<g>/version=<v>/run=<UTC time>/`) and where the
    # supervisors look for their version's newest snapshot (OFFERS_BATCH_OUTPUT_URI).
    output_uri: str
    # The batch role (IRSA): Scan the table, write under the output prefix. Not the serve
    # role, and not its ServiceAccount: each role is assumable by one account only.
    role_name: str = Field(pattern=IAM_ROLE_NAME)
    service_account: str = Field(pattern=DNS_1123_LABEL)
    head: HeadProfile
    workers: BatchWorkersProfile
    job: BatchJobKnobs
    active_deadline_s: int = Field(ge=1)
    ttl_after_finished_s: int = Field(ge=0)
    backoff_limit: int = Field(ge=0)

    @field_validator("output_uri")
    @classmethod
    def _s3_uri(cls, value: str) -> str:
        return s3_uri(value, "batch.output_uri")

    @field_validator("workers")
    @classmethod
    def _store_fits(cls, value: BatchWorkersProfile) -> BatchWorkersProfile:
        if value.object_store_gib >= value.memory_gib:
            raise ValueError("batch.workers.object_store_gib leaves no memory for the actors")
        return value

    def bucket(self) -> str:
        return s3_bucket(self.output_uri)

    def prefix(self) -> str:
        return s3_prefix(self.output_uri)


class MonitoringProfile(FrozenModel):
    # Labels the PodMonitor carries: what the Prometheus operator's podMonitorSelector
    # matches (kube-prometheus-stack: `release: <its Helm release name>`).
    pod_monitor_labels: dict[str, str] = Field(min_length=1)


class ProductionProfile(FrozenModel):
    name: str = Field(max_length=MAX_RAYSERVICE_NAME, pattern=DNS_1035_LABEL)
    namespace: str = Field(max_length=63, pattern=DNS_1123_LABEL)
    image: ImageProfile
    aws: AwsProfile
    dynamodb: DynamoDbProfile
    service_account: str = Field(pattern=DNS_1123_LABEL)
    api_key_secret: str = Field(pattern=DNS_1123_LABEL)
    head: HeadProfile
    workers: WorkerGroupProfile
    # Capacity the worker group must have beyond what every deployment at max_replicas
    # reserves: Ray's own per-node processes, bin-packing loss, a node being replaced.
    headroom: float = Field(ge=1.0, le=4.0)
    serve: ServeOverrides
    model_store: ModelStoreProfile
    monitoring: MonitoringProfile
    loadtest: LoadTestProfile
    batch: BatchProfile

    @field_validator("workers")
    @classmethod
    def _bounds(cls, value: WorkerGroupProfile) -> WorkerGroupProfile:
        if value.min_replicas > value.max_replicas:
            raise ValueError("workers.min_replicas exceeds workers.max_replicas")
        if value.schedulable_memory_gib() <= 0:
            raise ValueError(
                "workers.memory_gib leaves nothing for replicas after the object store and "
                "Ray's own processes"
            )
        return value

    @model_validator(mode="after")
    def _separate_identities(self) -> Self:
        # One ServiceAccount per role: the trust policies name the account, so a shared one
        # would give the replicas the batch role's writes, or the batch its reads, too.
        if self.batch.service_account == self.service_account:
            raise ValueError("batch.service_account must differ from service_account")
        if self.batch.role_name == self.aws.serve_role_name:
            raise ValueError("batch.role_name must differ from aws.serve_role_name")
        # The batch role writes under its output prefix and only reads the models: the
        # models must be out of reach of its writes.
        if s3_overlap(self.model_store.uri, self.batch.output_uri):
            raise ValueError(
                "model_store.uri and batch.output_uri overlap: the batch role, which writes "
                "under its output prefix, could overwrite published versions"
            )
        return self

    def table_arn(self) -> str:
        return (
            f"arn:aws:dynamodb:{self.aws.region}:{self.aws.account_id}:table/{self.dynamodb.table}"
        )


def load_profile(path: Path) -> ProductionProfile:
    return ProductionProfile.model_validate(yaml.safe_load(path.read_text()))


def k8s_quantity_gib(gib: float) -> str:
    """A memory quantity Kubernetes reads exactly: whole Gi, else whole Mi."""
    mib = gib * 1024
    if not float(mib).is_integer():
        raise ValueError(f"{gib} GiB is not a whole number of MiB")
    return f"{int(gib)}Gi" if float(gib).is_integer() else f"{int(mib)}Mi"


def k8s_quantity_cpu(cores: float) -> str:
    millis = cores * 1000
    if not float(millis).is_integer():
        raise ValueError(f"{cores} cores is not a whole number of millicores")
    return str(int(cores)) if float(cores).is_integer() else f"{int(millis)}m"
