"""Token authentication for the Ray clusters this project starts, from a project-local token.

Ray 2.60 turns token auth on, but only `ray.init()` of a new local cluster creates a token,
and always under `~/.ray/auth_token`. `ray start` never does: on a machine where Ray never
ran, `ray start --head` exits with "Token authentication is enabled but no authentication
token was found". So every cluster the project starts (`make run`, the tests, the benchmark,
the reliability and autoscaling runs, `make batch`) reads one token file inside the checkout,
made here when missing and named to every Ray process and CLI call by `RAY_AUTH_TOKEN_PATH`.
Nothing under `~/.ray` is read or written, so a run cannot pass on state a new user lacks.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import tempfile
from pathlib import Path

from app.local.processes import PROJECT_ROOT

TOKEN_FILE = PROJECT_ROOT / ".local" / "ray" / "auth_token"


def ensure_token(path: Path = TOKEN_FILE) -> Path:
    """The token file, written (owner-only, 256 random bits as Ray makes them) if missing.

    Two processes may race to create it: the file is made under a temporary name and linked
    into place, so the loser keeps the winner's token and nobody reads a half-written file.
    """
    if path.is_file() and path.read_text().strip():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    partial = Path(name)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32))
    try:
        if path.exists():  # there but empty: a crash between create and write
            os.replace(partial, path)
        else:
            os.link(partial, path)
    except FileExistsError:
        pass
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return path


def ray_auth_env(path: Path = TOKEN_FILE) -> dict[str, str]:
    """What a Ray process or CLI call needs to start or join a cluster of this project's."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(ensure_token(path))}


def auth_header(path: Path = TOKEN_FILE) -> dict[str, str]:
    """The header the dashboard's REST API (Serve's applications, `ray list`) asks for."""
    return {"Authorization": f"Bearer {ensure_token(path).read_text().strip()}"}


def shell_exports(path: Path = TOKEN_FILE, extra: dict[str, str] | None = None) -> str:
    """`export ...` lines for a shell: `eval "$(offers ray-env)"` before `ray start`; `extra`
    (Serve's process settings, the edge's) after the token's."""
    exports = {**ray_auth_env(path), **(extra or {})}.items()
    return "\n".join(f"export {key}={shlex.quote(value)}" for key, value in exports)
