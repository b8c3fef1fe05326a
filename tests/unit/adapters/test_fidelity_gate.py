"""A replica loads a version's members for its runtime only after every artifact's sha256
matched and its scores reproduce the native ones the manifest records (load_group)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from app.adapters.member_model import FidelityError, load_group
from app.contract.artifacts import ArtifactIntegrityError, sha256_of
from app.contract.manifest import MANIFEST_FILENAME, load_manifest

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


@pytest.fixture
def version(tmp_path, tiny_version_dir):
    folder = tmp_path / "version"
    shutil.copytree(tiny_version_dir, folder)
    return folder


def edit_manifest(folder, change):
    path = folder / MANIFEST_FILENAME
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    return load_manifest(folder)


def test_every_tiny_member_compiles_and_scores_one_call_for_all(version):
    manifest = load_manifest(version)
    assert all(e.serving is not None for e in manifest.members)
    group = load_group(manifest.members, version, "onnx", manifest.fidelity)
    assert set(group.runtimes.values()) == {"onnx"}
    assert len(group.parts) == 1  # one fused session, not one call per member
    rows = np.asarray(manifest.fidelity.rows, dtype=np.float32)
    native = load_group(manifest.members, version, "native", manifest.fidelity).score(rows)
    assert group.score(rows).shape == (len(manifest.members), len(rows))
    assert np.max(np.abs(group.score(rows) - native)) <= 1e-6


def test_a_compiled_member_that_differs_from_its_native_scores_is_refused(version):
    def shift_one_member(document):
        scores = document["fidelity"]["scores"]["hgb-w1"]
        scores[3] += 2e-6

    manifest = edit_manifest(version, shift_one_member)
    with pytest.raises(FidelityError) as refused:
        load_group(manifest.members, version, "onnx", manifest.fidelity)
    message = str(refused.value)
    assert "hgb-w1 (onnx)" in message and "check row 3" in message
    assert "by 2e-06" in message
    # Only that member is named.
    assert "xgb-all" not in message


def test_a_difference_within_the_tolerance_is_served(version):
    def nudge(document):
        document["fidelity"]["scores"]["hgb-w1"][3] += 5e-7

    manifest = edit_manifest(version, nudge)
    group = load_group(manifest.members, version, "onnx", manifest.fidelity)
    assert "hgb-w1" in group.runtimes


def test_the_native_runtime_is_held_to_the_same_scores(version):
    def shift(document):
        document["fidelity"]["scores"]["xgb-all"][0] += 1e-3

    manifest = edit_manifest(version, shift)
    with pytest.raises(FidelityError, match=r"xgb-all \(native\)"):
        load_group(manifest.members, version, "native", manifest.fidelity)


def test_a_tampered_compiled_artifact_is_refused_with_both_hashes(version):
    manifest = load_manifest(version)
    entry = manifest.member("xgb-all")
    path = version / entry.serving.artifact
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactIntegrityError) as refused:
        load_group(manifest.members, version, "onnx", manifest.fidelity)
    message = str(refused.value)
    assert message.startswith("xgb-all: sha256 mismatch for xgb-all.onnx")
    assert entry.serving.sha256 in message  # the manifest's hash, whole
    assert sha256_of(path) in message  # and the file's


def test_compiled_members_without_check_rows_are_refused(version):
    manifest = edit_manifest(version, lambda d: d.update(fidelity=None))
    with pytest.raises(FidelityError, match="no check rows"):
        load_group(manifest.members, version, "onnx", None)
    # Natively there is nothing compiled to check.
    load_group(manifest.members, version, "native", None)


def test_a_member_without_a_compiled_form_is_scored_natively_in_the_same_group(version):
    def uncompiled(document):
        for member in document["members"]:
            if member["name"] == "logreg-all":
                member["serving"] = None

    manifest = edit_manifest(version, uncompiled)
    group = load_group(manifest.members, version, "onnx", manifest.fidelity)
    assert group.runtimes["logreg-all"] == "native"
    assert {group.runtimes[e.name] for e in manifest.members if e.name != "logreg-all"} == {"onnx"}
    # Rows come back in the manifest's member order, whatever part scored them.
    rows = np.asarray(manifest.fidelity.rows, dtype=np.float32)
    scores = group.score(rows)
    for i, entry in enumerate(manifest.members):
        expected = np.asarray(manifest.fidelity.scores[entry.name])
        assert np.max(np.abs(scores[i] - expected)) <= 1e-6, entry.name


def test_a_loaded_group_returns_its_load_s_garbage_to_the_os(version, monkeypatch):
    """The heap is trimmed once the group is built and checked (app.adapters.heap): the
    parsed protos and the fused graph are garbage by then, not before."""
    import app.adapters.member_model as member_model

    calls: list[str] = []
    monkeypatch.setattr(member_model, "release_freed_heap", lambda: calls.append("trim"))
    manifest = load_manifest(version)
    group = load_group(manifest.members, version, "onnx", manifest.fidelity)
    assert calls == ["trim"] and len(group.parts) == 1
