"""Kubernetes deployment: k8s/ rendered from serve_config.yaml and a typed production profile.

`python -m app.k8s` (`make k8s`) writes a KubeRay RayService, its ServiceAccount (IRSA),
IAM policies, PodMonitor, Grafana dashboard ConfigMap, Dockerfile, kustomizations and a
locust Job. Deploy-time tooling: never imported by replicas.
"""
