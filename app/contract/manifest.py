"""The ensemble-version manifest: the contract between training (`models/`) and serving.

One manifest describes one ensemble version of one game: its feature schema, its offer catalog
snapshot, the fallback offer, and every member with the sha256 of its artifact. Serving reads
nothing else about a version.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.contract.feature_schema import FeatureSchema
from app.contract.ids import GAME_PATTERN, MEMBER_NAME_PATTERN, PROFILE_PATTERN, VERSION_PATTERN

MANIFEST_FILENAME = "manifest.json"

Framework = Literal["xgboost", "sklearn"]
# How a member is scored at serving: its training library's own predict (the reference), or
# its compiled ONNX graph run by ONNX Runtime (models.compile, app.adapters.onnx_members).
Runtime = Literal["onnx", "native"]


class Offer(BaseModel):
    """One purchasable offer in a game's catalog."""

    model_config = ConfigDict(frozen=True)

    offer_id: str
    item: str
    category: str
    price: float = Field(gt=0, description="list price in USD")
    discount: float = Field(ge=0, lt=1, description="fraction taken off the list price")
    # Numeric features the members see for this offer, in FeatureSchema.offer_features order.
    features: list[float]
    # Share of impressions of this offer that converted in the training data. It is what the
    # non-personalized fallback reports as its propensity.
    prior_propensity: float = Field(ge=0, le=1)

    @property
    def net_price(self) -> float:
        return self.price * (1.0 - self.discount)


class PredictCost(BaseModel):
    """A member's predict cost on one thread: a fixed part per call and a part per row.

    Measured once, when the version is trained (models.version_builder), so a layout planned
    from it is the same whatever the host is doing when an application is built."""

    model_config = ConfigDict(frozen=True)

    call_ms: float = Field(ge=0)
    row_ms: float = Field(ge=0)


class ServingArtifact(BaseModel):
    """A member's compiled form (models.compile): a standalone ONNX graph, checked like the
    native artifact (sha256 before parsing) and against the native scores (Fidelity)."""

    model_config = ConfigDict(frozen=True)

    runtime: Literal["onnx"] = "onnx"
    artifact: str = Field(description="artifact path relative to the manifest's folder")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=0)


class Fidelity(BaseModel):
    """Check rows and each member's native scores for them: a replica scoring with another
    runtime refuses to start when any of its scores differs by more than `tolerance`."""

    model_config = ConfigDict(frozen=True)

    rows: list[list[float]] = Field(min_length=1, description="float32 candidate rows")
    scores: dict[str, list[float]] = Field(description="member -> native propensity per row")
    tolerance: float = Field(default=1e-6, gt=0)

    @model_validator(mode="after")
    def _aligned(self) -> Fidelity:
        width = {len(r) for r in self.rows}
        if len(width) != 1:
            raise ValueError("fidelity rows must all have the same width")
        for name, scores in self.scores.items():
            if len(scores) != len(self.rows):
                raise ValueError(f"fidelity scores of {name} do not match the rows")
        return self


class MemberEntry(BaseModel):
    """One trained member of the ensemble and the evidence needed to trust its artifact."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=MEMBER_NAME_PATTERN)
    framework: Framework
    estimator: str = Field(description="estimator class, e.g. XGBClassifier")
    artifact: str = Field(description="artifact path relative to the manifest's folder")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    weight: float = Field(gt=0)
    auc: float = Field(ge=0, le=1, description="AUC on the version's held-out impressions")
    training: dict[str, str | int | float] = Field(
        default_factory=dict, description="data the member saw: window, sampling, segment, rows"
    )
    # The compiled form, when the member's estimator has one (None: served natively).
    serving: ServingArtifact | None = None
    # Runtime -> predict cost measured at training (empty in manifests trained before).
    costs: dict[Runtime, PredictCost] = Field(default_factory=dict)

    def runtime(self, wanted: Runtime) -> Runtime:
        """What this member is scored with when `wanted` is asked for."""
        return "onnx" if wanted == "onnx" and self.serving is not None else "native"


class Manifest(BaseModel):
    """Everything serving needs to know about one (game, version)."""

    model_config = ConfigDict(frozen=True)

    game: str = Field(pattern=GAME_PATTERN)
    version: str = Field(pattern=VERSION_PATTERN)
    profile: str = Field(pattern=PROFILE_PATTERN)
    training_config_hash: str
    feature_schema: FeatureSchema
    offers: list[Offer] = Field(min_length=1)
    fallback_offer_id: str
    members: list[MemberEntry] = Field(min_length=1)
    ensemble_auc: float = Field(ge=0, le=1)
    oracle_auc: float = Field(ge=0, le=1, description="AUC of the ground-truth probabilities")
    holdout_rows: int = Field(gt=0)
    fidelity: Fidelity | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        offer_ids = [o.offer_id for o in self.offers]
        if len(set(offer_ids)) != len(offer_ids):
            raise ValueError("offer ids must be unique")
        if self.fallback_offer_id not in offer_ids:
            raise ValueError(f"fallback offer {self.fallback_offer_id!r} is not in the catalog")
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise ValueError("member names must be unique")
        if self.fidelity is not None and sorted(self.fidelity.scores) != sorted(names):
            raise ValueError("fidelity scores must cover every member")
        width = len(self.feature_schema.offer_features)
        for offer in self.offers:
            if len(offer.features) != width or not all(math.isfinite(v) for v in offer.features):
                raise ValueError(f"offer {offer.offer_id!r} needs {width} finite features")
        return self

    @property
    def fallback_offer(self) -> Offer:
        return next(o for o in self.offers if o.offer_id == self.fallback_offer_id)

    def member(self, name: str) -> MemberEntry:
        for entry in self.members:
            if entry.name == name:
                return entry
        raise KeyError(name)


def load_manifest(path: Path) -> Manifest:
    """Read and validate a manifest file (`path` may be the file or its folder)."""
    if path.is_dir():
        path = path / MANIFEST_FILENAME
    return Manifest.model_validate_json(path.read_bytes())


def write_manifest(manifest: Manifest, folder: Path) -> Path:
    path = folder / MANIFEST_FILENAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2))
    tmp.replace(path)  # atomic: a reader never sees half a manifest
    return path
