"""Load tests and studies, one folder per study of several files (docs/development.md).

harness/      what every study uses: systems under test, the local cluster, load drivers
              (locust, open loop), the c=1 probe, memory sampling, results folders and spreads
bench/        the ensemble against legacy and the process pool (docs/performance.md)
reliability/  the SLA at the client under bursts and faults (docs/reliability.md)
autoscaling/  the login day, replicas against load (docs/autoscaling.md)
batch_bench/  the Ray Data job against the model-compute limit (docs/batch.md)
profile_replicas.py, routing_cost.py, autogroup_check.py: single-file studies
locustfile.py, traffic.py: the locust user and the traffic model (locust -f, k8s/ load jobs)
"""
