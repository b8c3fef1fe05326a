"""Where this checkout is: the defaults of the tools that read its files (serve_config.yaml,
k8s/, the sources an image is built from)."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
