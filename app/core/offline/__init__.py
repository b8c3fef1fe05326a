"""Scoring the whole player base offline (the batch job's scoring and its read pacing)."""
