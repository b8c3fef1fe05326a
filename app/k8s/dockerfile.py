"""The image: the official Ray image of the pinned version, the project, the served models.

Two targets from one file (k8s/Dockerfile, built from the repository root after
`make models`):
- `service`: what the RayService runs. The project is installed with constraints.txt, so
  every library is the version CI tested; the trained artifacts of every version the config
  serves are copied with their manifests, whose checksums the replicas verify at load as
  they do locally; it runs as the base image's non-root `ray` user.
- `loadtest`: `service` plus locust and loadtest/, for the in-cluster locust Job.
"""

from __future__ import annotations

from collections.abc import Iterable

ARTIFACTS_ROOT = "/home/ray/artifacts"
WORKDIR = "/home/ray/dynamic-offers"
# Where the base image's pip puts console scripts: Serve starts this as its HAProxy (app.edge).
EDGE_BINARY = "/home/ray/anaconda3/bin/offers-haproxy"


def base_image(ray_version: str, python: str) -> str:
    return f"rayproject/ray:{ray_version}-py{python.replace('.', '')}-cpu"


def dockerfile(
    *, ray_version: str, python: str, versions: Iterable[tuple[str, str, str]], header: str
) -> str:
    """`versions`: (profile, game, version) of every artifact folder to bake in."""
    copies = [
        f"COPY --chown=ray:users models/artifacts/{p}/{g}/{v}/ {ARTIFACTS_ROOT}/{p}/{g}/{v}/"
        for p, g, v in sorted(set(versions))
    ]
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
        "# The trained versions serve_config.yaml serves, with their manifests (checksums are",
        "# verified when a replica loads them). `make models` trains them into models/artifacts.",
        *copies,
        f"ENV OFFERS_ARTIFACTS_ROOT={ARTIFACTS_ROOT}",
        "",
        "FROM service AS loadtest",
        "COPY --chown=ray:users loadtest/ loadtest/",
        "RUN pip install --no-cache-dir -c constraints.txt locust",
        "USER ray",  # inherited already; said again so each stage states who it runs as
        "",
    ]
    return "\n".join(lines)
