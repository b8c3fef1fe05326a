"""The project's Ray token: made once, owner-only, and handed over the same way every time."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.local.ray_auth import auth_header, ensure_token, ray_auth_env, shell_exports

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_a_missing_token_is_made_owner_only_and_then_kept(tmp_path: Path):
    path = tmp_path / "ray" / "auth_token"
    assert ensure_token(path) == path
    token = path.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}", token)  # 256 bits, as Ray makes them
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_token(path).read_text() == token
    assert auth_header(path) == {"Authorization": f"Bearer {token}"}


def test_an_empty_token_file_is_replaced(tmp_path: Path):
    path = tmp_path / "auth_token"
    path.write_text("")
    assert re.fullmatch(r"[0-9a-f]{64}", ensure_token(path).read_text())


def test_racing_creators_all_end_with_the_same_token(tmp_path: Path):
    path = tmp_path / "auth_token"
    with ThreadPoolExecutor(max_workers=8) as pool:
        paths = list(pool.map(lambda _: ensure_token(path), range(32)))
    assert {p.read_text() for p in paths} == {path.read_text()}
    assert [p.name for p in tmp_path.iterdir()] == ["auth_token"]  # no partial files left


def test_the_env_names_the_token_file_and_token_mode(tmp_path: Path):
    path = tmp_path / "auth_token"
    assert ray_auth_env(path) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}


def test_a_shell_gets_the_same_settings_from_the_exports(tmp_path: Path):
    path = tmp_path / "a folder with spaces" / "auth_token"
    script = f'eval "$({sys.executable} -c "$PRINT")"; echo "$RAY_AUTH_MODE|$RAY_AUTH_TOKEN_PATH"'
    printer = (
        "from pathlib import Path; from app.local.ray_auth import shell_exports; "
        f"print(shell_exports(Path({str(path)!r})))"
    )
    out = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, "PRINT": printer},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == f"token|{path}"
    assert shell_exports(path).count("export ") == 2
