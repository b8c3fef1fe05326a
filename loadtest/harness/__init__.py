"""What the studies share. Nothing here imports a study (import-linter enforces it)."""
