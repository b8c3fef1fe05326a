"""k8s/ is what rendering serve_config.yaml and k8s/profile.yaml gives, byte for byte."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from app.k8s.render import DEFAULT_OUT, PROFILE_FILE, render, stale_files, write
from app.local.processes import PROJECT_ROOT

pytestmark = pytest.mark.unit


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


def test_serving_another_set_of_versions_is_another_image_tag(rendered, tmp_path):
    import yaml

    config = yaml.safe_load((PROJECT_ROOT / "serve_config.yaml").read_text())
    apps = config["applications"]
    stable_only = [a for a in apps if a["name"] != "galaxy-raiders-2026-11"]
    for app in stable_only:
        if "versions" in app.get("args", {}):
            app["args"]["versions"] = [
                v for v in app["args"]["versions"] if v["version"] != "2026-11"
            ]
    path = tmp_path / "serve_config.yaml"
    path.write_text(yaml.safe_dump({**config, "applications": stable_only}))
    other = render(path, DEFAULT_OUT / PROFILE_FILE)
    assert other.image != rendered.image
    assert other.image.split("-build.")[0] == rendered.image.split("-build.")[0]
    assert "2026-11" not in other.files["Dockerfile"] and "2026-10" in other.files["Dockerfile"]


def test_any_change_to_the_image_sources_is_a_new_tag(tmp_path):
    from app.k8s.render import build_fingerprint

    (tmp_path / "app" / "core").mkdir(parents=True)
    (tmp_path / "models").mkdir()
    source = tmp_path / "app" / "core" / "offers.py"
    source.write_text("x = 1\n")
    (tmp_path / "constraints.txt").write_text("ray==2.60.0\n")
    served = [("tiny", "galaxy-raiders", "2026-10")]
    first = build_fingerprint(tmp_path, served)
    assert build_fingerprint(tmp_path, served) == first
    source.write_text("x = 2\n")
    assert build_fingerprint(tmp_path, served) != first
    source.write_text("x = 1\n")
    (tmp_path / "constraints.txt").write_text("ray==2.61.0\n")
    assert build_fingerprint(tmp_path, served) != first
    (tmp_path / "constraints.txt").write_text("ray==2.60.0\n")
    (tmp_path / "app" / "notes.md").write_text("not in the image\n")
    assert build_fingerprint(tmp_path, served) == first
