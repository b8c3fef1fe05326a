"""The batch benchmark: players/s of the Ray Data job against the model-compute limit
(docs/batch.md). `python -m loadtest.batch_bench` (make batch-bench) runs runner.py.
"""
