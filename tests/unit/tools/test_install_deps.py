"""`make setup`'s installer hands pip's own settings to uv, so uv installs from the same
registries pip is configured with."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools.install_deps import CONSTRAINTS, EDITABLE, pip_settings, uv_command

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

UV = Path("/venv/bin/uv")


def options(args: list[str], flag: str) -> list[str]:
    return [value for name, value in zip(args, args[1:], strict=False) if name == flag]


def test_every_index_pip_knows_is_given_to_uv_and_every_index_is_searched():
    settings = {
        "index-url": "https://mirror.example/simple",
        "extra-index-url": "file:///opt/pypi/simple file:///opt/more/simple",
        "find-links": "/opt/wheels",
        "constraint": "/etc/xdg/pip/constraints.txt",
    }
    args, _ = uv_command(UV, "/venv/bin/python", settings)
    assert args[:3] == [str(UV), "pip", "install"]
    assert options(args, "--python") == ["/venv/bin/python"]
    assert options(args, "--index-url") == ["https://mirror.example/simple"]
    assert options(args, "--extra-index-url") == [
        "file:///opt/pypi/simple",
        "file:///opt/more/simple",
    ]
    assert options(args, "--find-links") == ["/opt/wheels"]
    # pip takes the best version from all indexes; uv's default would stop at the first
    # index that lists a package (a local one holding other versions of it).
    assert options(args, "--index-strategy") == ["unsafe-best-match"]
    # Bytecode at install, as pip writes it: no process may be left to compile Ray from
    # source at every start (PYTHONDONTWRITEBYTECODE).
    assert "--compile-bytecode" in args
    # The machine's caps and the project's pins, then the project itself, editable.
    assert options(args, "-c") == ["/etc/xdg/pip/constraints.txt", CONSTRAINTS]
    assert options(args, "-e") == [EDITABLE]


def test_no_settings_means_uvs_defaults_and_the_project_pins_only():
    args, _ = uv_command(UV, "/venv/bin/python", {})
    for flag in ("--index-url", "--extra-index-url", "--find-links"):
        assert flag not in args
    assert options(args, "-c") == [CONSTRAINTS]


def test_pips_ca_bundle_and_timeout_reach_uv_unless_the_environment_sets_them(monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("UV_HTTP_TIMEOUT", raising=False)
    _, env = uv_command(UV, "py", {"cert": "/etc/ssl/ca.crt", "default-timeout": "180"})
    assert env["SSL_CERT_FILE"] == "/etc/ssl/ca.crt"
    assert env["UV_HTTP_TIMEOUT"] == "180"
    monkeypatch.setenv("SSL_CERT_FILE", "/own.crt")
    _, env = uv_command(UV, "py", {"cert": "/etc/ssl/ca.crt"})
    assert env["SSL_CERT_FILE"] == "/own.crt"


def test_pip_settings_reads_config_files_and_pip_variables_the_variables_winning(
    tmp_path, monkeypatch
):
    """A real `pip config list`: a config file of its own, then PIP_* over it."""
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nfind-links = /from/file\nextra-index-url = file:///a file:///b\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_FIND_LINKS", "/from/env")
    settings = pip_settings(sys.executable)
    assert settings["extra-index-url"] == "file:///a file:///b"
    assert settings["find-links"] == "/from/env"
