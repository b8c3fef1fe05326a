"""The `offers` command (app.local.cli), run as a user would: a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.adapters.dynamodb import PARTITION_KEY, player_key
from app.local.processes import PROJECT_ROOT
from app.local.ray_auth import TOKEN_FILE
from app.local.seeding import SEED_MARKER_PREFIX
from app.local.serve_config import from_checkout
from models.population import player_id

pytestmark = pytest.mark.integration

OFFERS = Path(sys.executable).with_name("offers")


def offers(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(OFFERS), *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def config_for(tmp_path: Path, endpoint: str, table: str, args: dict, **app) -> Path:
    document = yaml.safe_load((PROJECT_ROOT / "serve_config.yaml").read_text())
    entry = document["applications"][0]
    document["applications"] = [entry]  # one version, no router
    entry["runtime_env"]["env_vars"].update(
        {"OFFERS_DYNAMODB_ENDPOINT_URL": endpoint, "OFFERS_DYNAMODB_TABLE": table}
    )
    from_checkout(entry)  # the versions these tests train, from their folder
    entry["args"].update(args)
    entry.update(app)
    path = tmp_path / "serve_config.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_train_writes_to_the_artifacts_root_from_the_environment(tmp_path):
    root = tmp_path / "artifacts"
    result = offers(
        "train", "--game", "galaxy-raiders", "--version", "2026-10", "--profile", "tiny",
        env={"OFFERS_ARTIFACTS_ROOT": str(root)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (root / "tiny" / "galaxy-raiders" / "2026-10" / "manifest.json").is_file()
    assert "ensemble AUC" in result.stdout and str(root) in result.stdout


def test_train_needs_a_version_or_all():
    result = offers("train", "--game", "galaxy-raiders")
    assert result.returncode == 2
    assert "--all" in result.stderr


def test_seed_loads_the_configured_table(tmp_path, dynalite_server, tiny_version_dir):
    table = "player-features-cli"
    args = {"profile": "tiny", "artifacts_root": str(tiny_version_dir.parents[2])}
    config = config_for(tmp_path, dynalite_server.endpoint_url, table, args)
    result = offers("seed", "--config", str(config), "--players", "50")
    assert result.returncode == 0, result.stderr
    client = dynalite_server.client()
    key = {PARTITION_KEY: {"S": player_key("galaxy-raiders", player_id(49))}}
    assert "Item" in client.get_item(TableName=table, Key=key)
    marker = {PARTITION_KEY: {"S": f"{SEED_MARKER_PREFIX}#galaxy-raiders"}}
    assert client.get_item(TableName=table, Key=marker)["Item"]["players"] == {"N": "50"}
    again = offers("seed", "--config", str(config), "--players", "50")
    assert again.returncode == 0 and "already seeded" in again.stderr


def test_prepare_explains_a_deployment_override_the_layout_does_not_create(
    tmp_path, tiny_version_dir
):
    # One member group: per-member names such as member-xgb-all are not created. (Under
    # `layout: auto` they are, when the plan gives xgb-all its own deployment.)
    refusal = prepare_refusal(
        tmp_path, tiny_version_dir, {"placement": "groups", "groups": 1}, "member-xgb-all"
    )
    assert "does not create" in refusal
    assert "member-group-0" in refusal


def test_prepare_refuses_an_override_no_auto_plan_could_create(tmp_path, tiny_version_dir):
    refusal = prepare_refusal(
        tmp_path, tiny_version_dir, {"placement": "auto"}, "member-extra-trees"
    )
    assert "member-extra-trees" in refusal and "does not create" in refusal
    assert "member-xgb-all" in refusal  # what it could create instead


def prepare_refusal(tmp_path, version_dir, layout: dict, overridden: str) -> str:
    """`offers prepare` of the tiny version with `layout` and a deployment override of
    `overridden`: refused as a usage error (exit 2, no traceback); its message."""
    args = {"profile": "tiny", "artifacts_root": str(version_dir.parents[2]), "layout": layout}
    config = config_for(
        tmp_path,
        "http://127.0.0.1:4567",
        "player-features",
        args,
        deployments=[{"name": overridden, "num_replicas": 2}],
    )
    result = offers("prepare", "--config", str(config))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    return result.stderr


def test_an_unknown_args_key_is_refused_with_its_name(tmp_path):
    config = config_for(tmp_path, "http://127.0.0.1:4567", "player-features", {"coalesing": {}})
    result = offers("prepare", "--config", str(config))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "coalesing" in result.stderr


def test_ray_env_prints_exports_a_shell_can_eval_for_the_project_token():
    """The README recipe's first step: `eval "$(offers ray-env)"` before `ray start`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    shell = subprocess.run(
        ["bash", "-c", f'eval "$({OFFERS} ray-env)"; echo "$RAY_AUTH_MODE|$RAY_AUTH_TOKEN_PATH"'],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    mode, token_path = shell.stdout.strip().split("|")
    assert mode == "token"
    assert token_path == str(TOKEN_FILE)
    assert len(Path(token_path).read_text().strip()) == 64
