"""The login day against the shipped config with room to grow (docs/autoscaling.md).
`python -m loadtest.autoscaling` (make autoscaling) runs runner.py.
"""
