"""The image: the official Ray image of the pinned version and the project. No model.

Two targets from one file (k8s/Dockerfile, built from the repository root):
- `service`: what the RayService runs. The project is installed with constraints.txt, so
  every library is the version CI tested; it runs as the base image's non-root `ray` user.
  It holds no trained artifact: replicas load their version from the model store into their
  pod's cache, checking every sha256 against the manifest (app.adapters.model_store), so a
  new ensemble version is a serveConfigV2 change, never a new image;
- `loadtest`: `service` plus locust and loadtest/, for the in-cluster locust Job.
"""

from __future__ import annotations

WORKDIR = "/home/ray/dynamic-offers"
# Where the base image's pip puts console scripts: Serve starts this as its HAProxy (app.edge).
EDGE_BINARY = "/home/ray/anaconda3/bin/offers-haproxy"


def base_image(ray_version: str, python: str) -> str:
    return f"rayproject/ray:{ray_version}-py{python.replace('.', '')}-cpu"


def dockerfile(*, ray_version: str, python: str, header: str) -> str:
    lines = [
        header.rstrip("\n"),
        f"FROM {base_image(ray_version, python)} AS service",
        "USER ray",
        # Made by `ray` first: a builder that creates WORKDIR itself may make it root's.
        f"RUN mkdir -p {WORKDIR}",
        f"WORKDIR {WORKDIR}",
        "COPY --chown=ray:users pyproject.toml constraints.txt README.md ./",
        "COPY --chown=ray:users app/ app/",
        "COPY --chown=ray:users models/*.py models/",
        "RUN pip install --no-cache-dir -c constraints.txt . \\",
        "    && python -c 'import app.serving.builder' \\",
        f"    && test -x {EDGE_BINARY}",
        "# No trained model: replicas load their version from the model store (model_store in",
        "# k8s/profile.yaml) into their pod's cache, so a new version needs no new image.",
        "",
        "FROM service AS loadtest",
        "COPY --chown=ray:users loadtest/ loadtest/",
        "RUN pip install --no-cache-dir -c constraints.txt locust",
        "USER ray",  # inherited already; said again so each stage states who it runs as
        "",
    ]
    return "\n".join(lines)
