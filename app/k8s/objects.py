"""The Kubernetes objects around the RayService: identity, observability, load test, kustomize.

- ServiceAccount with the IRSA role annotation (the serve role's trust policy names it);
- PodMonitor (prometheus-operator) for Ray's metrics port and Serve's HAProxy exporter on
  every Ray pod of this RayService;
- the Grafana dashboard as a ConfigMap, labelled for Grafana's dashboard sidecar;
- the locust Job, KubeRay's load-test pattern: locust in a pod against the Serve service;
- kustomization.yaml, so `kubectl apply -k k8s/` applies the service. The API key's digest
  is a kustomize secretGenerator from a file that is never committed (k8s/api-key.sha256),
  so the repository holds no key material and `apply` stops if the file is missing. The
  load test is its own kustomization (k8s/loadtest/): applying the service never starts it.
"""

from __future__ import annotations

import json
from typing import Any

from app.k8s.pods import RAY_GID, RAY_UID
from app.k8s.profile import ProductionProfile
from app.k8s.rayservice import SERVE_PORT

DASHBOARD_FILE = "offers-dashboard.json"
API_KEY_DIGEST_FILE = "api-key.sha256"
LOADTEST_API_KEY_FILE = "loadtest-api-key"
LOADTEST_API_KEY_KEY = "key"  # the load-test Secret's key holding the plain API key


def namespace(profile: ProductionProfile) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": profile.namespace}}


def service_account(profile: ProductionProfile) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": profile.service_account,
            "namespace": profile.namespace,
            "annotations": {"eks.amazonaws.com/role-arn": profile.aws.serve_role_arn()},
        },
        # Head and worker pods run as this account (app.k8s.rayservice). It mounts no API
        # token: the replicas never call the Kubernetes API, and the head pod mounts one for
        # itself, for the autoscaler sidecar, to whose account KubeRay binds the sidecar's
        # RBAC. IRSA's token is a separate projected volume, unaffected.
        "automountServiceAccountToken": False,
    }


def pod_monitor(profile: ProductionProfile) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": f"{profile.name}-ray",
            "namespace": profile.namespace,
            "labels": dict(profile.monitoring.pod_monitor_labels),
        },
        "spec": {
            # Pods of this RayService's clusters only, head and workers, across upgrades
            # (KubeRay puts ray.io/node-type on every Ray pod; our pod labels carry the rest).
            "selector": {
                "matchLabels": {"app.kubernetes.io/instance": profile.name},
                "matchExpressions": [
                    {"key": "ray.io/node-type", "operator": "In", "values": ["head", "worker"]}
                ],
            },
            "podMetricsEndpoints": [
                {"port": "metrics", "path": "/metrics", "interval": "10s"},
                {"port": "haproxy-metrics", "path": "/metrics", "interval": "10s"},
            ],
        },
    }


def dashboard_config_map(profile: ProductionProfile, dashboard: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{profile.name}-grafana-dashboard",
            "namespace": profile.namespace,
            # Grafana's dashboard sidecar (kube-prometheus-stack) loads ConfigMaps with this label.
            "labels": {"grafana_dashboard": "1"},
        },
        "data": {DASHBOARD_FILE: json.dumps(dashboard, indent=2, sort_keys=True) + "\n"},
    }


def loadtest_job(profile: ProductionProfile, *, image: str) -> dict[str, Any]:
    lt = profile.loadtest
    host = f"http://{profile.name}-serve.{profile.namespace}.svc:{SERVE_PORT}"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{profile.name}-locust", "namespace": profile.namespace},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "dynamic-offers-locust"}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RAY_UID,
                        "runAsGroup": RAY_GID,
                    },
                    "containers": [
                        {
                            "name": "locust",
                            "image": image,
                            "workingDir": "/home/ray/dynamic-offers",
                            "command": ["locust"],
                            "args": [
                                "-f",
                                "loadtest/locustfile.py",
                                "--headless",
                                "--host",
                                host,
                                "--route-prefix",
                                lt.route_prefix,
                                "--users",
                                str(lt.users),
                                "--spawn-rate",
                                f"{lt.spawn_rate:g}",
                                "--run-time",
                                lt.run_time,
                                "--user-rps",
                                f"{lt.user_rps:g}",
                                "--players",
                                str(lt.players),
                                "--only-summary",
                            ],
                            # The plain key (the service holds only its digest), from its own
                            # secret; the locustfile sends it as X-API-Key.
                            "env": [
                                {
                                    "name": "OFFERS_API_KEY",
                                    "valueFrom": {
                                        "secretKeyRef": {
                                            "name": lt.api_key_secret,
                                            "key": LOADTEST_API_KEY_KEY,
                                        }
                                    },
                                }
                            ],
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"cpu": "1", "memory": "1Gi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def kustomization(
    profile: ProductionProfile, resources: list[str], *, secret: str, key: str, from_file: str
) -> dict[str, Any]:
    """A kustomization applying `resources` plus one secret generated from a local file."""
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": profile.namespace,
        "resources": resources,
        "secretGenerator": [{"name": secret, "files": [f"{key}={from_file}"]}],
        # The RayService and the Job name the secrets; kustomize does not rewrite names inside
        # a custom resource, so the names stay as written.
        "generatorOptions": {"disableNameSuffixHash": True},
    }
