"""The reliability run: the SLA at the client under overload, bursts and faults
(docs/reliability.md). `python -m loadtest.reliability` (make reliability) runs runner.py.
"""
