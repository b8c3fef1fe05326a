"""`offers plan`: the layout `auto` builds, as a table, from the costs the manifest records."""

from __future__ import annotations

import pytest
import yaml

from app.contract.manifest import load_manifest
from app.local.cli import main
from app.local.processes import PROJECT_ROOT

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def tiny_config(tmp_path, tiny_version_dir, layout):
    document = yaml.safe_load((PROJECT_ROOT / "serve_config.yaml").read_text())
    app = document["applications"][0]
    app["args"] |= {
        "profile": "tiny",
        "artifacts_root": str(tiny_version_dir.parents[2]),
        "layout": layout,
    }
    document["applications"] = [app]
    path = tmp_path / "serve_config.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def table_rows(out: str) -> dict[str, list[str]]:
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows[1:]}


def test_plan_prints_every_member_its_cost_placement_and_reason(tmp_path, tiny_version_dir, capsys):
    path = tiny_config(tmp_path, tiny_version_dir, {"placement": "auto"})
    assert main(["plan", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    members = [e.name for e in load_manifest(tiny_version_dir).members]
    assert sorted(rows) == sorted(members)
    for cells in rows.values():
        assert cells[1] == "onnx"  # the shipped runtime; every tiny member compiles
        assert float(cells[2]) >= 0 and float(cells[4]) > 0  # ms per call, per fan-out
        assert cells[7] in {"inline", "grouped", "dedicated"}
        assert cells[9]  # why
    # The tiny members cost far less than a hop: all inline, so no hop at all.
    assert {cells[7] for cells in rows.values()} == {"inline"}
    assert "costs from manifest" in out
    assert "expected CPU per login" in out and "one deployment per member" in out


def test_plan_for_another_load_and_machine(tmp_path, tiny_version_dir, capsys):
    path = tiny_config(tmp_path, tiny_version_dir, {"groups": 2})
    assert main(["plan", "--config", str(path), "--load", "300", "--cores", "6"]) == 0
    out = capsys.readouterr().out
    assert "layout in the config: groups (below: what `auto` would build)" in out
    assert "planned for 300 logins/s per supervisor replica" in out
    assert "6 cores a fan-out can use" in out


def test_plan_for_the_native_runtime_uses_the_native_costs(tmp_path, tiny_version_dir, capsys):
    path = tiny_config(tmp_path, tiny_version_dir, {"placement": "auto"})
    assert main(["plan", "--config", str(path), "--runtime", "native"]) == 0
    rows = table_rows(capsys.readouterr().out)
    manifest = load_manifest(tiny_version_dir)
    for entry in manifest.members:
        cells = rows[entry.name]
        assert cells[1] == "native"
        # The table prints ms to three places: compare the same rounding, not a tolerance
        # that a cost ending in 5 at the fourth place falls just outside.
        assert cells[2] == f"{entry.costs['native'].call_ms:.3f}"
