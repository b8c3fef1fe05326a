"""What the layer rules promise, checked in fresh interpreters (import-linter checks the
import graph statically in `make lint`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.local.processes import PROJECT_ROOT

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def modules_after(imports: str) -> set[str]:
    code = f"import sys; {imports}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def test_replica_code_imports_no_training_local_or_benchmark_code():
    loaded = modules_after(
        "import app.serving.builder, app.serving.supervisor, app.serving.member_group"
    )
    assert "ray" in loaded  # the serving layer is what runs in replicas
    # Not checked: psutil and uvicorn, which Ray Serve itself loads.
    forbidden = ("models", "loadtest", "locust", "matplotlib")
    assert not [m for m in loaded if m.split(".")[0] in forbidden or m.startswith("app.local")]


def test_seeding_a_table_does_not_import_ray():
    loaded = modules_after("import app.local.seeding, app.local.cli")
    assert "ray" not in loaded


def test_training_imports_only_the_contract_of_the_service():
    loaded = modules_after("import models.train, models.version_builder, models.evaluation")
    service = {m for m in loaded if m.startswith("app.")}
    assert service and all(m.startswith("app.contract") for m in service), sorted(service)
