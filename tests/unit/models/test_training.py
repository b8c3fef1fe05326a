"""Training: the tiny profile end to end, its manifest, its artifacts and the training cache."""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.adapters.member_model import MemberModel
from app.contract.artifacts import ArtifactIntegrityError, load_artifact, sha256_of, version_dir
from app.contract.manifest import MANIFEST_FILENAME, Manifest, MemberEntry, load_manifest
from app.core.aggregation import MemberScores
from app.core.aggregation import weighted_mean as weighted_mean_of_members
from models import recipes
from models.catalog import GAMES, catalog_offers
from models.datasets import holdout
from models.estimators import fit_and_save
from models.evaluation import auc, ensemble_scores
from models.features import feature_schema
from models.train import ensure_trained, ensure_trained_all

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

GAME, VERSION, PROFILE = "galaxy-raiders", "2026-10", "tiny"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An artifacts root holding the tiny profile of every game and version (trained in
    parallel processes, as `offers prepare` trains the versions a config serves)."""
    root = tmp_path_factory.mktemp("artifacts")
    ensure_trained_all([(g, v, PROFILE, root) for g in GAMES for v in recipes.VERSIONS])
    return root


@pytest.fixture(scope="module")
def folder(root: Path) -> Path:
    return version_dir(root, PROFILE, GAME, VERSION)


@pytest.fixture(scope="module")
def manifest(folder: Path) -> Manifest:
    return load_manifest(folder)


def _copy_root(root: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "artifacts"
    shutil.copytree(root, copy)
    return copy


def _mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


# --- recipes, without training -------------------------------------------------------------


def test_standard_profile_is_twelve_mostly_xgboost_members() -> None:
    members = recipes.profile("standard").members
    assert len(members) == 12
    xgboost = [m for m in members if m.framework == "xgboost"]
    sklearn_kinds = {m.estimator for m in members if m.framework == "sklearn"}
    assert len(xgboost) > len(members) / 2
    assert len(sklearn_kinds) >= 2
    assert {m.sampling for m in members} == {"all", "bootstrap"}
    assert {"ios", "android"} <= {m.segment for m in members}


# The parameters that make each kind of member bigger (and slower to score).
_SIZE_PARAMS = {
    "xgboost": ("n_estimators", "max_depth"),
    "hist_gradient_boosting": ("max_iter", "max_leaf_nodes"),
    "extra_trees": ("n_estimators", "max_depth"),
}


def test_heavy_profile_is_the_standard_members_made_bigger() -> None:
    """Same names (serve configs list members by name), same data slices, bigger models."""
    standard = {m.name: m for m in recipes.profile("standard").members}
    heavy = recipes.profile("heavy").members
    assert [m.name for m in heavy] == list(standard)
    for member in heavy:
        base = standard[member.name]
        same = ("estimator", "windows", "sampling", "segment", "seed")
        assert [getattr(member, f) for f in same] == [getattr(base, f) for f in same]
        if member.estimator == "logistic_regression":
            assert "spline_knots" not in base.params
            assert member.params["spline_knots"] >= 4
            assert member.params["interaction_degree"] == 2
            continue
        for key in _SIZE_PARAMS[member.estimator]:
            assert member.params[key] > base.params[key], (member.name, key)


def test_heavy_logistic_regression_expands_features_and_loads_from_skops(
    tmp_path: Path,
) -> None:
    """Its spline basis is scipy BSplines: the artifact must still load through skops."""
    recipe = next(m for m in recipes.profile("heavy").members if m.name == "logreg-all")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2_000, len(feature_schema().column_names))).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] + rng.normal(size=len(X)) > 1.0).astype(np.int64)
    saved = fit_and_save(recipe, X, y, tmp_path)
    assert "SplineTransformer" in saved.summary["pipeline"]
    assert "pairwise interactions" in saved.summary["pipeline"]
    entry = MemberEntry(
        name=recipe.name,
        framework="sklearn",
        estimator=saved.estimator,
        artifact=saved.artifact,
        sha256=sha256_of(tmp_path / saved.artifact),
        weight=1.0,
        auc=0.5,
    )
    scores = load_artifact(entry, tmp_path).predict(X[:10])
    assert scores.shape == (10,) and np.all((scores > 0) & (scores < 1))


def test_interactions_without_a_spline_basis_are_refused(tmp_path: Path) -> None:
    recipe = recipes.MemberRecipe(
        name="logreg-bad",
        estimator="logistic_regression",
        rows=100,
        params={"interaction_degree": 2},
    )
    X = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="needs spline_knots"):
        fit_and_save(recipe, X, np.array([0, 1, 0, 1]), tmp_path)


@pytest.mark.parametrize("profile", sorted(recipes.PROFILES))
def test_member_names_are_valid_and_unique(profile: str) -> None:
    names = recipes.profile(profile).member_names()
    assert len(set(names)) == len(names)
    assert all(NAME_PATTERN.match(n) for n in names)


def test_versions_hold_out_a_later_window() -> None:
    for spec in recipes.VERSIONS.values():
        assert spec.holdout_window > max(spec.train_windows)


def test_config_hash_separates_games_versions_and_profiles() -> None:
    hashes = {
        recipes.training_config_hash(g, v, p)
        for g in GAMES
        for v in recipes.VERSIONS
        for p in recipes.PROFILES
    }
    assert len(hashes) == len(GAMES) * len(recipes.VERSIONS) * len(recipes.PROFILES)


def test_unknown_names_are_clear_key_errors(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="unknown game"):
        ensure_trained("space-farm", VERSION, PROFILE, root=tmp_path)
    with pytest.raises(KeyError, match="unknown version"):
        ensure_trained(GAME, "1999-01", PROFILE, root=tmp_path)
    with pytest.raises(KeyError, match="unknown profile"):
        ensure_trained(GAME, VERSION, "giant", root=tmp_path)
    assert not any(tmp_path.iterdir())


# --- the trained tiny versions -------------------------------------------------------------


def test_manifest_describes_the_version(folder: Path, manifest: Manifest, root: Path) -> None:
    assert folder == root / PROFILE / GAME / VERSION
    assert (manifest.game, manifest.version, manifest.profile) == (GAME, VERSION, PROFILE)
    assert manifest.training_config_hash == recipes.training_config_hash(GAME, VERSION, PROFILE)
    assert [m.name for m in manifest.members] == recipes.profile(PROFILE).member_names()
    assert sum(m.weight for m in manifest.members) == pytest.approx(1.0)
    assert manifest.holdout_rows == recipes.profile(PROFILE).test_rows
    for member in manifest.members:
        assert {"windows", "sampling", "segment", "rows"} <= member.training.keys()


def test_members_record_their_predict_cost(root: Path) -> None:
    """Median ms of one 10-row score call; measured, never asserted against a threshold."""
    for game in GAMES:
        for version in recipes.VERSIONS:
            manifest = load_manifest(version_dir(root, PROFILE, game, version))
            for member in manifest.members:
                cost = member.training["predict_ms_10_rows"]
                assert isinstance(cost, float) and cost > 0, (game, version, member.name)


def test_members_see_their_own_windows(root: Path) -> None:
    later = load_manifest(version_dir(root, PROFILE, GAME, "2026-11"))
    assert later.member("xgb-all").training["windows"] == "2,3,4,5"
    assert later.member("hgb-w1").training["windows"] == "3"
    assert later.member("xgb-ios").training["segment"] == "ios"


@pytest.mark.parametrize("version", sorted(recipes.VERSIONS))
@pytest.mark.parametrize("game", GAMES)
def test_ensemble_is_at_least_as_good_as_its_average_member(
    root: Path, game: str, version: str
) -> None:
    manifest = load_manifest(version_dir(root, PROFILE, game, version))
    mean_member = statistics.fmean(m.auc for m in manifest.members)
    assert manifest.ensemble_auc >= mean_member
    assert 0.5 < manifest.ensemble_auc <= manifest.oracle_auc + 0.02


def test_ensemble_auc_is_reproduced_from_the_artifacts(folder: Path, manifest: Manifest) -> None:
    test = holdout(GAME, recipes.version_spec(VERSION), recipes.profile(PROFILE)).test
    assert len(test) == manifest.holdout_rows
    scores = ensemble_scores(manifest, folder, test.X)
    assert abs(auc(test.y, scores) - manifest.ensemble_auc) < 1e-9
    assert abs(auc(test.y, test.p_true) - manifest.oracle_auc) < 1e-9


def test_training_aggregates_exactly_like_serving(folder: Path, manifest: Manifest) -> None:
    """The manifest's ensemble AUC describes what serving computes: same loader, same mean."""
    test = holdout(GAME, recipes.version_spec(VERSION), recipes.profile(PROFILE)).test
    X = test.X[:300]
    served = weighted_mean_of_members(
        [
            MemberScores(e.name, e.weight, MemberModel.load(e, folder).score(X))
            for e in manifest.members
        ]
    )
    np.testing.assert_allclose(ensemble_scores(manifest, folder, X), served, rtol=0, atol=1e-12)


def test_artifact_checksums_match_the_manifest(folder: Path, manifest: Manifest) -> None:
    for member in manifest.members:
        assert sha256_of(folder / member.artifact) == member.sha256


def test_every_framework_loads_and_scores_probabilities(folder: Path, manifest: Manifest) -> None:
    test = holdout(GAME, recipes.version_spec(VERSION), recipes.profile(PROFILE)).test
    frameworks = set()
    for entry in manifest.members:
        scores = load_artifact(entry, folder).predict(test.X[:500])
        assert scores.shape == (500,) and np.all((scores >= 0) & (scores <= 1))
        frameworks.add(entry.framework)
        suffix = ".ubj" if entry.framework == "xgboost" else ".skops"
        assert entry.artifact.endswith(suffix)
    assert frameworks == {"xgboost", "sklearn"}


def test_offers_carry_observed_priors_and_the_best_fallback(manifest: Manifest) -> None:
    catalog = catalog_offers(GAME)
    assert [o.offer_id for o in manifest.offers] == [o.offer_id for o in catalog]
    for offer, item in zip(manifest.offers, catalog, strict=True):
        assert offer.features == list(item.features)
        assert 0 < offer.prior_propensity < 1
    best = max(manifest.offers, key=lambda o: o.prior_propensity * o.net_price)
    assert manifest.fallback_offer_id == best.offer_id
    assert manifest.fallback_offer in manifest.offers


def test_no_staging_leftovers(folder: Path) -> None:
    siblings = {p.name for p in folder.parent.iterdir()}
    assert siblings == set(recipes.VERSIONS) | {f".{v}.lock" for v in recipes.VERSIONS}


# --- artifact integrity --------------------------------------------------------------------


def test_a_flipped_byte_is_refused(folder: Path, manifest: Manifest, tmp_path: Path) -> None:
    copy = tmp_path / "version"
    shutil.copytree(folder, copy)
    for entry in manifest.members:
        _flip_a_byte(copy / entry.artifact)
        with pytest.raises(ArtifactIntegrityError, match="sha256 mismatch"):
            load_artifact(entry, copy)


def test_an_artifact_outside_the_version_folder_is_refused(
    folder: Path, manifest: Manifest, tmp_path: Path
) -> None:
    copy = tmp_path / "version"
    shutil.copytree(folder, copy)
    entry = manifest.members[0]
    # A byte-identical file outside the folder: only the path check can refuse it.
    shutil.copy(folder / entry.artifact, tmp_path / entry.artifact)
    escaping = entry.model_copy(update={"artifact": f"../{entry.artifact}"})
    with pytest.raises(ArtifactIntegrityError, match="escapes"):
        load_artifact(escaping, copy)


# --- the training cache --------------------------------------------------------------------


def test_a_second_call_reuses_the_version(folder: Path, root: Path) -> None:
    before = _mtimes(folder)
    again = ensure_trained(GAME, VERSION, PROFILE, root=root)
    assert again == folder
    assert _mtimes(folder) == before


def test_parallel_training_scores_as_training_alone_does(
    folder: Path, manifest: Manifest, tmp_path: Path
) -> None:
    """Same members, same scores (the files differ run to run in their metadata bytes)."""
    alone_folder = ensure_trained(GAME, VERSION, PROFILE, root=tmp_path)
    alone = load_manifest(alone_folder)
    X = holdout(GAME, recipes.version_spec(VERSION), recipes.profile(PROFILE)).test.X[:300]
    assert [m.name for m in alone.members] == [m.name for m in manifest.members]
    for ours, theirs in zip(manifest.members, alone.members, strict=True):
        np.testing.assert_allclose(
            load_artifact(ours, folder).predict(X),
            load_artifact(theirs, alone_folder).predict(X),
            rtol=0,
            atol=1e-12,
            err_msg=ours.name,
        )


def test_force_retrains(root: Path, tmp_path: Path) -> None:
    copy = _copy_root(root, tmp_path)
    target = version_dir(copy, PROFILE, GAME, VERSION)
    before = _mtimes(target)
    ensure_trained(GAME, VERSION, PROFILE, root=copy, force=True)
    after = _mtimes(target)
    assert after.keys() == before.keys()
    assert all(after[name] != before[name] for name in before)
    retrained = load_manifest(target)
    for entry in retrained.members:
        load_artifact(entry, target)


def test_a_tampered_version_is_retrained(root: Path, manifest: Manifest, tmp_path: Path) -> None:
    copy = _copy_root(root, tmp_path)
    target = version_dir(copy, PROFILE, GAME, VERSION)
    artifact = target / manifest.members[0].artifact
    _flip_a_byte(artifact)
    ensure_trained(GAME, VERSION, PROFILE, root=copy)
    assert sha256_of(artifact) == load_manifest(target).members[0].sha256


def test_a_changed_recipe_is_retrained(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = _copy_root(root, tmp_path)
    monkeypatch.setattr(recipes, "CODE_VERSION", "models-test")
    target = ensure_trained(GAME, VERSION, PROFILE, root=copy)
    assert load_manifest(target).training_config_hash == recipes.training_config_hash(
        GAME, VERSION, PROFILE
    )


def test_a_half_written_version_is_not_trusted(root: Path, tmp_path: Path) -> None:
    copy = _copy_root(root, tmp_path)
    target = version_dir(copy, PROFILE, GAME, VERSION)
    (target / MANIFEST_FILENAME).write_text("{")
    ensure_trained(GAME, VERSION, PROFILE, root=copy)
    load_manifest(target)


# --- imports -----------------------------------------------------------


def test_importing_the_training_entry_point_loads_no_ml_library() -> None:
    code = (
        "import sys, models.train, models.population, models.recipes; "
        "print(sorted(m for m in ('xgboost', 'sklearn', 'skops') if m in sys.modules))"
    )
    root_dir = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root_dir, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
