"""The benchmark: the Ray Serve ensemble against legacy and a process pool (docs/performance.md).

`python -m loadtest.bench` (make bench) runs runner.py.
"""
