"""The worker group holds every deployment at max_replicas with headroom, checked twice:
by the generator (app.k8s.sizing) and here, independently, from the rendered manifest."""

from __future__ import annotations

import pytest

from app.config.app_args import EnsembleAppArgs
from app.config.router_args import RouterAppArgs
from app.k8s.serve_config import production_serve_config
from app.k8s.sizing import SizingError, check_worker_group, demands
from app.local.serve_config import BUILDER_IMPORT_PATH
from models import recipes

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def cpu(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_the_worker_group_covers_every_deployment_at_max_replicas(
    rayservice, serve_config_v2, profile
):
    reserved_cpu = reserved_gib = min_cpu = 0.0
    deployments = 0
    for app in serve_config_v2["applications"]:
        if app["import_path"] == BUILDER_IMPORT_PATH:
            args = EnsembleAppArgs.model_validate(app["args"])
            members = recipes.profile(args.profile).member_names()
            sizes = [args.supervisor] + [
                args.members.updated(args.member_deployments.get(f"member-{m}", {}))
                for m in members
            ]
        else:
            sizes = [RouterAppArgs.model_validate(app["args"]).router]
        for s in sizes:
            deployments += 1
            reserved_cpu += s.num_cpus * s.autoscaling.max_replicas
            reserved_gib += s.memory_mb / 1024 * s.autoscaling.max_replicas
            min_cpu += s.num_cpus * s.autoscaling.min_replicas
    assert deployments == 2 * (1 + 12) + 1  # two versions of supervisor + 12 members, a router

    (group,) = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    schedulable_gib = int(group["rayStartParams"]["memory"]) / 2**30
    assert group["maxReplicas"] * cpu(limits["cpu"]) >= reserved_cpu * profile.headroom
    assert group["maxReplicas"] * schedulable_gib >= reserved_gib * profile.headroom
    assert group["minReplicas"] * cpu(limits["cpu"]) >= min_cpu
    # The memory Ray schedules into plus the object store and Ray's own share fit the pod.
    store_gib = int(group["rayStartParams"]["object-store-memory"]) / 2**30
    assert schedulable_gib + store_gib < float(limits["memory"].removesuffix("Gi"))


def test_a_group_too_small_is_refused_with_the_numbers(profile, serve_config_v2):
    found = demands(serve_config_v2)
    small = profile.workers.model_copy(update={"max_replicas": 6})
    with pytest.raises(SizingError, match=r"CPU: the deployments reserve 66 at max_replicas"):
        check_worker_group(found, small, profile.headroom)
    # Six nodes can hold 42 CPUs, but not six supervisors one per node plus everything else;
    # and a minimum of one node cannot start two supervisors that must not share a node.
    one = profile.workers.model_copy(update={"min_replicas": 1})
    with pytest.raises(SizingError, match="min_replicas needs more nodes"):
        check_worker_group(found, one, profile.headroom)


def test_every_replica_must_reserve_memory_on_a_cluster(profile):
    import yaml

    from app.k8s.render import DEFAULT_CONFIG

    serve = profile.serve.model_copy(update={"router_args": {}})
    config = production_serve_config(
        yaml.safe_load(DEFAULT_CONFIG.read_text()), profile.model_copy(update={"serve": serve})
    )
    with pytest.raises(SizingError, match="galaxy-raiders/router: no memory_mb"):
        check_worker_group(demands(config), profile.workers, profile.headroom)


def test_a_member_deployment_the_layout_does_not_create_is_refused(profile, serve_config_v2):
    config = {**serve_config_v2, "applications": [dict(serve_config_v2["applications"][0])]}
    app = config["applications"][0]
    app["args"] = {**app["args"], "member_deployments": {"member-nope": {"num_cpus": 1.0}}}
    with pytest.raises(SizingError, match="member-nope"):
        demands(config)
