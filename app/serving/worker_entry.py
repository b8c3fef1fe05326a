"""How a replica's Ray worker process starts: Ray's own worker script, without pandas.

Ray starts a worker as `<py_executable> default_worker.py <arguments>`. A replica's
py_executable (app.serving.builder.replica_runtime_env) is `python -m
app.serving.worker_entry`, so this module runs first and then Ray's script, as `__main__`, in
the same process, as `python default_worker.py` would.

Why: Serve imports pandas (`ray.serve._private.utils`) only to JSON-encode a DataFrame, which
no offer, refusal or health answer is. In a replica that import was ~0.4 of the ~2.8 CPU-s its
imports take and 36 MB of its resident memory (2026-11-29, quiet host, `import ray.serve` and
the replica's modules with and without it). Here an import of pandas raises
ModuleNotFoundError, as if it were not installed, which is how Serve, XGBoost and
scikit-learn take it (scikit-learn asks `sys.modules` whether pandas was imported: a None
entry there would break it). Code a replica runs that needs pandas fails at that import,
loudly; batch jobs, tools and Serve's own processes start as Ray starts them, with pandas.
"""

from __future__ import annotations

import os
import runpy
import shlex
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

# The modules a replica keeps out (see the module's docstring).
KEPT_OUT = ("pandas",)


def command(python: str | None = None) -> str:
    """The shell command (a runtime_env's py_executable) that starts a worker through this
    module, with `python` (default: this interpreter, the node's)."""
    return f"{shlex.quote(python or sys.executable)} -m {__spec__.name}"


class KeptOut(MetaPathFinder):
    """Finds the KEPT_OUT packages (and their modules) missing, before any other finder."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname.partition(".")[0] in KEPT_OUT:
            raise ModuleNotFoundError(
                f"No module named {fullname!r} in a replica (app.serving.worker_entry)",
                name=fullname,
            )
        return None


def run_worker(argv: list[str]) -> None:
    """Run the script argv[0] with the arguments argv[1:] as `python argv[0] ...` would: as
    `__main__`, with sys.argv and sys.path[0] as that command sets them."""
    sys.meta_path.insert(0, KeptOut())
    script = argv[0]
    sys.argv = list(argv)
    if not sys.flags.safe_path:  # `python -P script` adds no folder, `-m` none to replace
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    run_worker(sys.argv[1:])
