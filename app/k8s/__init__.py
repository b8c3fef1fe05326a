"""Kubernetes deployment: k8s/ rendered from serve_config.yaml and a typed production profile.

`python -m app.k8s` (`make k8s`) writes a KubeRay RayService, its ServiceAccount (IRSA),
IAM policies, PodMonitor, Grafana dashboard ConfigMap, Dockerfile, kustomizations, a
locust Job, and the batch-scoring RayJobs with their own ServiceAccount and IAM role.
Deploy-time tooling: never imported by replicas.
"""
