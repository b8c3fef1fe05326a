"""Installs the pinned Python dependencies into the venv (`make setup`): with uv, else pip.

`pip install -c constraints.txt -e '.[dev,bench]'` into a fresh venv with empty caches took
133 s on this 2-core host (2026-11-28), about half of a fresh `make run`'s first hour; uv
installs the same pinned set, package for package, in 9 s (13 s with installing uv itself),
plus the bytecode pip writes too (below).

uv does not read pip's configuration, and a machine's registries are often set there (a
mirror, local wheel folders, a CA bundle). So the settings pip resolves from its config files
and PIP_* variables are handed to uv: index-url, extra-index-url, find-links, constraint
(a machine's own caps), cert and default-timeout. And uv considers every index for every
package, as pip does: uv's default takes a package from the first index that lists it,
which fails where a local index holds other versions of it. If uv cannot be installed or
its install fails, pip installs everything as before; the reason is printed.

Standard library only: it runs before anything else is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# uv itself, pinned like everything else (it only installs; nothing imports it).
UV_REQUIREMENT = "uv==0.13.9"
CONSTRAINTS = str(ROOT / "constraints.txt")  # the whole resolved tree, pinned
EDITABLE = ".[dev,bench]"  # the project itself, with its test and load-test extras


def pip(python: str, *args: str) -> list[str]:
    return [python, "-m", "pip", *args]


def pip_settings(python: str) -> dict[str, str]:
    """pip's effective settings, by option name: its config files' (`pip config list`), then
    its PIP_* variables (listed as `:env:.<name>`) over them, as pip applies them. The
    variables win whatever the listing's order, which differs between pip releases (23.2
    lists them first, 26.3 last)."""
    listed = subprocess.run(
        pip(python, "config", "list"), capture_output=True, text=True, check=False
    ).stdout
    files: dict[str, str] = {}
    variables: dict[str, str] = {}
    for line in listed.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            section, _, name = key.rpartition(".")
            (variables if section == ":env:" else files)[name] = value.strip().strip("'\"")
    return {**files, **variables}


def uv_command(uv: Path, python: str, settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The `uv pip install` of the project, and its environment, from pip's settings."""
    args = [str(uv), "pip", "install", "--quiet", "--python", python]
    args += ["--index-strategy", "unsafe-best-match"]
    # Bytecode now, as pip writes it: uv leaves it out, and where PYTHONDONTWRITEBYTECODE is
    # set (CI's machines) no process ever caches it, so every Ray worker compiled Ray, Serve
    # and pandas from source at each start. Replica workers then started ~70 s after being
    # scheduled in a slow hour, and two clean-clone CI runs failed on it (2026-11-28).
    args += ["--compile-bytecode"]
    if settings.get("index-url"):
        args += ["--index-url", settings["index-url"]]
    for url in settings.get("extra-index-url", "").split():
        args += ["--extra-index-url", url]
    for location in settings.get("find-links", "").split():
        args += ["--find-links", location]
    for constraints in settings.get("constraint", "").split():
        args += ["-c", constraints]
    args += ["-c", CONSTRAINTS, "-e", EDITABLE]
    env = dict(os.environ)
    if settings.get("cert") and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = settings["cert"]
    if settings.get("default-timeout"):
        env.setdefault("UV_HTTP_TIMEOUT", settings["default-timeout"].split(".")[0])
    return args, env


def with_uv(python: str) -> str | None:
    """Installs with uv; None when done, else why not."""
    installed = subprocess.run(
        pip(python, "install", "--quiet", UV_REQUIREMENT), capture_output=True, text=True
    )
    if installed.returncode != 0:
        return f"pip could not install {UV_REQUIREMENT}: {installed.stderr.strip()[-500:]}"
    uv = Path(python).parent / "uv"
    args, env = uv_command(uv, python, pip_settings(python))
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return f"uv failed: {done.stderr.strip()[-1500:]}"
    return None


def with_pip(python: str) -> int:
    subprocess.run(pip(python, "install", "--quiet", "--upgrade", "pip"), check=False)
    return subprocess.run(
        pip(python, "install", "--quiet", "-c", CONSTRAINTS, "-e", EDITABLE), cwd=ROOT
    ).returncode


def main() -> int:
    python = sys.executable  # the venv's: `make` runs this script with it
    reason = with_uv(python)
    if reason is None:
        return 0
    print(f"install_deps: {reason}\ninstall_deps: installing with pip instead", file=sys.stderr)
    return with_pip(python)


if __name__ == "__main__":
    sys.exit(main())
