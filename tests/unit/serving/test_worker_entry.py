"""A replica's worker starts through app.serving.worker_entry: Ray's worker script runs as if
started directly, and pandas cannot be imported in it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.serving import worker_entry

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

# Stands for Ray's default_worker.py: reports what a started script sees.
SCRIPT = """
import json, sys
try:
    import pandas.core.frame
    pandas_found = True
except ModuleNotFoundError:
    pandas_found = False
print(json.dumps({
    "name": __name__, "argv": sys.argv, "path0": sys.path[0], "pandas": pandas_found,
    # scikit-learn asks this to know whether pandas was imported
    "listed": "pandas" in sys.modules,
}))
"""


def started(command: str, script: Path) -> dict[str, object]:
    """What `script` reports when started as Ray starts a worker: `exec <py_executable>
    <script> <arguments>` in bash (ray._private.runtime_env.context)."""
    out = subprocess.run(
        ["bash", "-c", f"exec {command} {script} --flag 'two words'"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[3],  # the checkout, where `app` is importable either way
    )
    return dict(json.loads(out.stdout))


def test_the_script_runs_as_it_would_alone_but_without_pandas(tmp_path):
    script = tmp_path / "default_worker.py"
    script.write_text(SCRIPT)
    direct = started(sys.executable, script)
    entered = started(worker_entry.command(), script)
    assert direct["pandas"] is True  # installed: only the entry keeps it out
    assert entered == {**direct, "pandas": False, "listed": False}
    assert entered["name"] == "__main__"
    assert entered["argv"] == [str(script), "--flag", "two words"]
    assert entered["path0"] == str(tmp_path)


def test_the_command_names_this_interpreter_and_module():
    assert worker_entry.command("/opt/my env/bin/python") == (
        "'/opt/my env/bin/python' -m app.serving.worker_entry"
    )
