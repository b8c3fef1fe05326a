"""Ablation variants: the shipped config with exactly one lever off, still a valid config."""

import pytest
import yaml

from app.config.app_args import EnsembleAppArgs
from app.config.edge import EDGE_ENV, EdgeConfig
from app.config.ray_env import ray_node_env
from app.local.processes import PROJECT_ROOT as ROOT
from app.local.serve_config import edge_env
from loadtest.bench.variants import PRODUCTION, VARIANTS
from loadtest.harness.systems import derived_serve_config
from loadtest.harness.variant import ray_env

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


BASES = {
    "shipped": ROOT / "serve_config.yaml",
    PRODUCTION: ROOT / "serve_config.production-layout.yaml",
}


def derive(tmp_path, variant=None, base="shipped"):
    path, prefix, env = derived_serve_config(
        BASES[base],
        profile="tiny",
        port=18123,
        endpoint_url="http://127.0.0.1:4999",
        table="t",
        out=tmp_path / "derived.yaml",
        variant=variant,
    )
    document = yaml.safe_load(path.read_text())
    return document, prefix, env


def test_the_shipped_config_runs_with_serves_process_settings_and_the_edge(tmp_path):
    document, prefix, env = derive(tmp_path)
    assert env == {**ray_node_env(), **edge_env(tmp_path / "derived.yaml")}
    edge = EdgeConfig.model_validate_json(env[EDGE_ENV])
    app_args = EnsembleAppArgs.model_validate(document["applications"][0]["args"])
    limits = edge.backends[document["applications"][0]["name"]]
    assert limits.max_in_flight == app_args.admission.max_in_flight
    assert env["RAY_SERVE_HAPROXY_BINARY_PATH"].endswith("/offers-haproxy")
    assert document["http_options"]["port"] == 18123
    app = document["applications"][0]
    assert app["route_prefix"] == prefix
    assert app["args"]["profile"] == "tiny"
    assert app["runtime_env"]["env_vars"]["OFFERS_DYNAMODB_ENDPOINT_URL"] == "http://127.0.0.1:4999"


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_variant_is_a_valid_config_differing_in_its_lever_only(tmp_path, name):
    variant = VARIANTS[name]
    shipped, _, shipped_env = derive(tmp_path, None, variant.base)
    document, _, env = derive(tmp_path, variant, variant.base)
    args = EnsembleAppArgs.model_validate(document["applications"][0]["args"])
    base_args = EnsembleAppArgs.model_validate(shipped["applications"][0]["args"])
    changed_args = {k for k in type(args).model_fields if getattr(args, k) != getattr(base_args, k)}
    assert changed_args == set(variant.args)
    changed_env = {k for k in env.keys() | shipped_env.keys() if env.get(k) != shipped_env.get(k)}
    # A variant without the edge drops its two settings (serve_config.edge_env), nothing else;
    # one changing the edge's admission settings changes the edge's config, nothing else.
    edge_off = set() if variant.edge else {"RAY_SERVE_HAPROXY_BINARY_PATH", EDGE_ENV}
    edge_changed = {EDGE_ENV} if variant.edge and "admission" in variant.args else set()
    assert changed_env == set(variant.ray_env) | edge_off | edge_changed
    replica = document["applications"][0]["runtime_env"]["env_vars"]
    base_replica = shipped["applications"][0]["runtime_env"]["env_vars"]
    assert {k: v for k, v in replica.items() if base_replica.get(k) != v} == variant.replica_env


def test_python_proxy_variant_drops_haproxy_but_keeps_the_fast_path():
    env = ray_env(VARIANTS["python-proxy"])
    assert not any(key.startswith("RAY_SERVE_HAPROXY") for key in env)
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in env
    assert env["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "1"


def test_variants_cover_the_issue_levers():
    assert VARIANTS["grpc-off"].ray_env == {"RAY_SERVE_USE_GRPC_BY_DEFAULT": "0"}
    assert VARIANTS["no-coalescing"].args == {"coalescing": {"enabled": False}}
    assert VARIANTS["production-uncoalesced"].base == PRODUCTION
    assert VARIANTS["deep-edge-queue"].args == {"admission": {"edge_max_queued": 10_000}}
    assert VARIANTS["fresh-replica-connections"].args == {
        "admission": {"edge_replica_keepalive": False}
    }
    assert VARIANTS["no-edge-relay"].args == {"admission": {"edge_relay": False}}
    assert VARIANTS["shallow-edge-queue"].args == {"admission": {"edge_max_queued": 1}}
    assert VARIANTS["short-edge-queue"].args == {"admission": {"edge_queue_timeout_ms": 5}}
    assert VARIANTS["edge-queue-30ms"].args == {"admission": {"edge_queue_timeout_ms": 30}}
    assert VARIANTS["haproxy-4-threads"].ray_env == {"RAY_SERVE_HAPROXY_NBTHREAD": "4"}
    assert VARIANTS["control-loop-0.25"].ray_env == {"RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.25"}


def test_planned_production_runs_the_layout_k8s_ships():
    from loadtest.bench.variants import PRODUCTION_LAYOUT

    profile = yaml.safe_load((ROOT / "k8s" / "profile.yaml").read_text())
    assert profile["serve"]["ensemble_args"]["layout"] == PRODUCTION_LAYOUT


def test_layout_variants_and_fixed_replicas(tmp_path):
    layouts = {
        name: EnsembleAppArgs.model_validate(
            derive(tmp_path, VARIANTS[name])[0]["applications"][0]["args"]
        )
        for name in ("per-member", "grouped", "planned-production", "no-autoscaling")
    }
    assert layouts["per-member"].layout.placement == "per_member"
    assert (layouts["grouped"].layout.placement, layouts["grouped"].layout.groups) == ("groups", 2)
    assert layouts["planned-production"].layout.max_parallel == 4
    fixed = layouts["no-autoscaling"]
    shipped = EnsembleAppArgs.model_validate(derive(tmp_path)[0]["applications"][0]["args"])
    for role in ("supervisor", "members"):
        scaling = getattr(fixed, role).autoscaling
        assert scaling.min_replicas == scaling.max_replicas
        assert scaling.min_replicas == getattr(shipped, role).autoscaling.min_replicas
    assert shipped.layout.placement == "auto"
