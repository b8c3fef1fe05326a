"""k8s/ is what rendering serve_config.yaml and k8s/profile.yaml gives, byte for byte."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys

import pytest
import yaml

from app.config.serve_document import BUILDER_IMPORT_PATH, ROUTER_IMPORT_PATH
from app.k8s.render import DEFAULT_CONFIG, DEFAULT_OUT, PROFILE_FILE, render, stale_files, write
from app.local.processes import PROJECT_ROOT

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_committed_files_are_byte_identical_to_a_fresh_render(rendered):
    assert stale_files(rendered, DEFAULT_OUT) == [], "k8s/ is stale: run `make k8s` and commit"
    for name, text in rendered.files.items():
        assert (DEFAULT_OUT / name).read_bytes() == text.encode(), name


def test_rendering_twice_gives_the_same_bytes(rendered, tmp_path):
    write(render(), tmp_path)
    assert {n: (tmp_path / n).read_text() for n in rendered.files} == rendered.files


def test_check_names_edited_missing_and_left_over_files(tmp_path):
    out = tmp_path / "k8s"
    shutil.copytree(DEFAULT_OUT, out)
    check = [sys.executable, "-m", "app.k8s", "--out", str(out), "--check"]
    ok = subprocess.run(check, cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "up to date" in ok.stdout and "image" in ok.stdout

    (out / "rayservice.yaml").write_text((out / "rayservice.yaml").read_text() + "# edit\n")
    (out / "podmonitor.yaml").unlink()
    (out / "old-service.yaml").write_text("kind: Service\n")
    (out / "api-key.sha256").write_text("0" * 64)  # the operator's secret file: not stale
    stale = subprocess.run(check, cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert stale.returncode == 1
    assert "old-service.yaml, podmonitor.yaml, rayservice.yaml" in stale.stderr
    assert "api-key.sha256" not in stale.stderr


def test_print_image_prints_only_the_image_the_manifests_run(rendered):
    result = subprocess.run(
        [sys.executable, "-m", "app.k8s", "--print-image"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout == rendered.image + "\n"
    assert f"image: {rendered.image}\n" in rendered.files["rayservice.yaml"]


def test_a_profile_error_stops_rendering_with_the_reason(tmp_path):
    profile = tmp_path / PROFILE_FILE
    text = (DEFAULT_OUT / PROFILE_FILE).read_text()
    profile.write_text(text.replace("name: dynamic-offers ", "name: Dynamic_Offers "))
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "app.k8s", "--profile", str(profile), "--out", str(out)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "name" in result.stderr and "pattern" in result.stderr
    assert not out.exists()  # nothing half-written


def with_a_new_version(config, game, version, weight):
    """A Serve config document with one more version of `game`, as a release adds it: an
    application like the game's newest (its args but the version), and an entry at
    `weight` in the game's router."""
    config = copy.deepcopy(config)
    apps = config["applications"]
    (router,) = [
        a for a in apps if a["import_path"] == ROUTER_IMPORT_PATH and a["args"]["game"] == game
    ]
    newest = max(
        (a for a in apps if a["import_path"] == BUILDER_IMPORT_PATH and a["args"]["game"] == game),
        key=lambda a: a["args"]["version"],
    )
    added = copy.deepcopy(newest)
    added["name"] = f"{game}-{version}"
    added["route_prefix"] = f"/{game}/{version}"
    added["args"]["version"] = version
    apps.insert(apps.index(newest), added)
    router["args"]["versions"].append({"version": version, "weight": weight})
    return config


def test_a_new_version_at_weight_0_changes_serve_config_v2_only_and_keeps_the_image(
    tmp_path, profile
):
    local = yaml.safe_load(DEFAULT_CONFIG.read_text())
    newer = with_a_new_version(local, "galaxy-raiders", "2026-12", weight=0)
    # The shipped worker group is sized for two versions (make k8s refuses a third): the same
    # larger one for both renders, so only the config differs.
    workers = profile.workers
    bigger = profile.model_copy(
        update={
            "workers": workers.model_copy(
                update={
                    "min_replicas": 2 * workers.min_replicas,
                    "max_replicas": 2 * workers.max_replicas,
                }
            )
        }
    )
    profile_path = tmp_path / PROFILE_FILE
    profile_path.write_text(yaml.safe_dump(bigger.model_dump(), sort_keys=False))
    renders = {}
    for name, config in (("before", local), ("after", newer)):
        path = tmp_path / name / "conf" / "serve_config.yaml"  # one name in both headers
        path.parent.mkdir(parents=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        renders[name] = render(path, profile_path)
    before, after = renders["before"], renders["after"]

    assert after.image == before.image  # no new image to build
    service = {n for n in before.files if not n.startswith("batch/")}
    assert {n for n in after.files if not n.startswith("batch/")} == service
    changed = sorted(n for n in service if after.files[n] != before.files[n])
    assert changed == ["rayservice.yaml"]
    old, new = (yaml.safe_load(r.files["rayservice.yaml"]) for r in (before, after))
    # KubeRay compares rayClusterConfig to decide on a new cluster: it is the same, so the
    # new serveConfigV2 is applied to the running cluster, in place.
    assert new["spec"]["rayClusterConfig"] == old["spec"]["rayClusterConfig"]
    assert new["spec"]["serveConfigV2"] != old["spec"]["serveConfigV2"]
    for document in (old, new):
        document["spec"].pop("serveConfigV2")
    assert new == old
    # And serveConfigV2 gained the version and its router entry, nothing else.
    old_apps, new_apps = (
        {a["name"]: a for a in yaml.safe_load(r["spec"]["serveConfigV2"])["applications"]}
        for r in (yaml.safe_load(x.files["rayservice.yaml"]) for x in (before, after))
    )
    assert set(new_apps) - set(old_apps) == {"galaxy-raiders-2026-12"}
    assert [n for n in old_apps if new_apps[n] != old_apps[n]] == ["galaxy-raiders"]
    assert new_apps["galaxy-raiders"]["args"]["versions"][-1] == {"version": "2026-12", "weight": 0}
    assert new_apps["galaxy-raiders-2026-12"]["args"]["artifacts"] == profile.model_store.uri
    # The batch RayJobs (applied on their own) get one for the new version.
    batch = {n for n in after.files if n.startswith("batch/")} - set(before.files)
    assert batch == {"batch/rayjob-galaxy-raiders-2026-12.yaml"}


def test_any_change_to_the_image_sources_is_a_new_tag_and_nothing_else_is(tmp_path):
    from app.k8s.render import build_fingerprint

    (tmp_path / "app" / "core").mkdir(parents=True)
    (tmp_path / "models").mkdir()
    source = tmp_path / "app" / "core" / "offers.py"
    source.write_text("x = 1\n")
    (tmp_path / "constraints.txt").write_text("ray==2.60.0\n")
    first = build_fingerprint(tmp_path)
    assert build_fingerprint(tmp_path) == first
    source.write_text("x = 2\n")
    assert build_fingerprint(tmp_path) != first
    source.write_text("x = 1\n")
    (tmp_path / "constraints.txt").write_text("ray==2.61.0\n")
    assert build_fingerprint(tmp_path) != first
    (tmp_path / "constraints.txt").write_text("ray==2.60.0\n")
    (tmp_path / "app" / "notes.md").write_text("not in the image\n")
    assert build_fingerprint(tmp_path) == first
    # Trained versions are not in the image: training one leaves the tag alone.
    trained = tmp_path / "models" / "artifacts" / "standard" / "galaxy-raiders" / "2026-12"
    trained.mkdir(parents=True)
    (trained / "manifest.json").write_text("{}\n")
    (trained / "member.ubj").write_bytes(b"model")
    assert build_fingerprint(tmp_path) == first
