"""Train the members of one (game, version, profile), weight them and write the manifest."""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from app.contract.artifacts import LoadedArtifact, load_artifact, sha256_of
from app.contract.manifest import Manifest, MemberEntry, Offer, write_manifest
from models import recipes
from models.catalog import CatalogOffer, catalog_offers
from models.datasets import Holdout, holdout, member_data, training_logs
from models.estimators import fit_and_save
from models.evaluation import auc, weighted_mean, weights_from_validation_aucs
from models.features import feature_schema
from models.population import ImpressionLog
from models.serving_build import FIDELITY_PLAYERS, with_serving_artifacts

log = logging.getLogger(__name__)

# Predict cost: median wall time of one member predict call on a 10-row candidate matrix
# (one request's candidate set for a 10-offer catalog), over TIMED_CALLS calls after WARMUP_CALLS.
TIMING_ROWS = 10
WARMUP_CALLS = 5
TIMED_CALLS = 50


def build_version(
    game: str, version: str, profile: str, folder: Path, config_hash: str
) -> Manifest:
    spec, prof = recipes.version_spec(version), recipes.profile(profile)
    logs = training_logs(game, spec, prof)
    held_out = holdout(game, spec, prof)

    drafts = [_train_member(recipe, game, spec, logs, folder) for recipe in prof.members]
    # Members are scored through the contract's loader on the saved artifacts, so the numbers
    # describe exactly what serving will compute.
    loaded = [load_artifact(entry, folder) for entry in drafts]
    members, ensemble_auc = _weigh_and_judge(drafts, loaded, held_out)
    offers = _offers_with_priors(catalog_offers(game), list(logs.values()))
    manifest = Manifest(
        game=game,
        version=version,
        profile=profile,
        training_config_hash=config_hash,
        feature_schema=feature_schema(),
        offers=offers,
        fallback_offer_id=max(offers, key=lambda o: o.prior_propensity * o.net_price).offer_id,
        members=members,
        ensemble_auc=ensemble_auc,
        oracle_auc=auc(held_out.test.y, held_out.test.p_true),
        holdout_rows=len(held_out.test),
    )
    manifest = _with_predict_costs(manifest, loaded, held_out)
    manifest = with_serving_artifacts(manifest, loaded, _check_rows(manifest, held_out), folder)
    mean_auc = float(np.mean([m.auc for m in members]))
    if ensemble_auc < mean_auc:
        log.warning(
            "%s %s %s: ensemble AUC %.4f is below the mean member AUC %.4f",
            game,
            version,
            profile,
            ensemble_auc,
            mean_auc,
        )
    write_manifest(manifest, folder)
    return manifest


def _train_member(
    recipe: recipes.MemberRecipe,
    game: str,
    spec: recipes.VersionSpec,
    logs: dict[int, ImpressionLog],
    folder: Path,
) -> MemberEntry:
    """Fit and save one member. Its weight and AUC are placeholders until all are scored."""
    data = member_data(recipe, spec, logs, game)
    started = time.perf_counter()
    saved = fit_and_save(recipe, data.X, data.y, folder)
    seconds = time.perf_counter() - started
    log.info("%s %s: %s on %d rows in %.1fs", game, spec.version, recipe.name, len(data.y), seconds)
    training: dict[str, str | int | float] = {
        "windows": ",".join(map(str, data.windows)),
        "sampling": recipe.sampling,
        "segment": recipe.segment,
        "rows": len(data.y),
        "positives": int(data.y.sum()),
        "seed": recipe.seed,
        "fit_seconds": round(seconds, 2),
    }
    return MemberEntry(
        name=recipe.name,
        framework=recipe.framework,
        estimator=saved.estimator,
        artifact=saved.artifact,
        sha256=sha256_of(folder / saved.artifact),
        weight=1.0,
        auc=0.5,
        training=training | saved.summary,
    )


def _weigh_and_judge(
    drafts: list[MemberEntry], loaded: list[LoadedArtifact], held_out: Holdout
) -> tuple[list[MemberEntry], float]:
    """Weights from validation AUCs, then member and ensemble AUCs on the test sample."""
    val_aucs = [auc(held_out.validation.y, m.predict(held_out.validation.X)) for m in loaded]
    weights = weights_from_validation_aucs(val_aucs)
    test_scores = [m.predict(held_out.test.X) for m in loaded]
    members = [
        MemberEntry.model_validate(
            entry.model_dump()
            | {
                "weight": weight,
                "auc": auc(held_out.test.y, scores),
                "training": entry.training | {"validation_auc": round(val_auc, 6)},
            }
        )
        for entry, weight, scores, val_auc in zip(
            drafts, weights, test_scores, val_aucs, strict=True
        )
    ]
    ensemble = weighted_mean(test_scores, [m.weight for m in members])
    return members, auc(held_out.test.y, ensemble)


def _offers_with_priors(
    catalog: tuple[CatalogOffer, ...], logs: list[ImpressionLog]
) -> list[Offer]:
    """Manifest offers, each with its observed conversion rate in the training impressions."""
    offer_index = np.concatenate([lg.offer_index for lg in logs])
    bought = np.concatenate([lg.y for lg in logs])
    offers = []
    for k, item in enumerate(catalog):
        shown = offer_index == k
        offers.append(
            Offer(
                offer_id=item.offer_id,
                item=item.item,
                category=item.category,
                price=item.price,
                discount=item.discount,
                features=[float(v) for v in item.features],
                prior_propensity=float(bought[shown].mean()) if shown.any() else 0.0,
            )
        )
    return offers


def _with_predict_costs(
    manifest: Manifest, loaded: list[LoadedArtifact], held_out: Holdout
) -> Manifest:
    """The manifest with each member's `predict_ms_10_rows` in its training dict.

    The matrices are what serving scores for one request: a held-out player's candidate rows
    (FeatureSchema.candidate_rows), TIMING_ROWS rows each (one player's set for a 10-offer
    catalog). Calls run on this thread with OpenMP and BLAS limited to one thread, as in a
    serving replica: Ray sets OMP_NUM_THREADS=1 for actors given less than one CPU.
    """
    schema = manifest.feature_schema
    offer_features = np.array([o.features for o in manifest.offers], dtype=np.float32)
    calls = WARMUP_CALLS + TIMED_CALLS
    players = held_out.test.X[: calls * TIMING_ROWS, : schema.player_width]
    stacked = schema.candidate_rows(players, offer_features)
    matrices = [
        stacked[start : start + TIMING_ROWS]
        for start in range(0, len(stacked) - TIMING_ROWS + 1, TIMING_ROWS)
    ][:calls]
    members = []
    with threadpool_limits(limits=1):
        for entry, model in zip(manifest.members, loaded, strict=True):
            cost = _median_predict_ms(model, matrices)
            log.info("%s: predict on %d rows %.3f ms", entry.name, TIMING_ROWS, cost)
            training = entry.training | {"predict_ms_10_rows": round(cost, 4)}
            members.append(entry.model_copy(update={"training": training}))
    return Manifest.model_validate(manifest.model_dump() | {"members": members})


def _check_rows(manifest: Manifest, held_out: Holdout) -> np.ndarray:
    """The fidelity check rows: the candidate rows of a few held-out players, as served."""
    schema = manifest.feature_schema
    offer_features = np.array([o.features for o in manifest.offers], dtype=np.float32)
    players = held_out.test.X[:FIDELITY_PLAYERS, : schema.player_width]
    return np.ascontiguousarray(schema.candidate_rows(players, offer_features), np.float32)


def _median_predict_ms(model: LoadedArtifact, matrices: list[np.ndarray]) -> float:
    for matrix in matrices[:WARMUP_CALLS]:
        model.predict(matrix)
    seconds = []
    for matrix in matrices[WARMUP_CALLS:]:
        started = time.perf_counter()
        model.predict(matrix)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds) * 1000.0
