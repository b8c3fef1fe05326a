"""Ray Data's detached helper actors, ended once a cluster's batch work is done.

A Ray Data job leaves four detached actors on the cluster it ran on, for good: its stats,
its usage collection, its autoscaling coordinator and its actor-location tracker. On
`make run`'s node, after the precomputed tier's jobs (app.local.precompute), they held
746 MB of resident memory and ~3.8 % of a core while the service idled, beside the replicas.
A cluster that runs no other Ray Data job at the same time can end them: the next job makes
them again (Ray Data gets or creates each by name).
"""

from __future__ import annotations

# (name, namespace) as Ray Data 2.60 registers them (the usage actor only where Ray's usage
# stats are on); the batch job's integration test checks that a job still leaves them.
RAY_DATA_ACTORS = (
    ("datasets_stats_actor", "_dataset_stats_actor"),
    ("DataUsageCollectionActor", "DataUsageCollectionActor"),
    ("AutoscalingCoordinator", "AutoscalingCoordinator"),
    ("ActorLocationTracker", "ActorLocationTracker"),
)


def release_data_actors() -> list[str]:
    """End the Ray Data helper actors this driver's cluster holds: the names ended."""
    import ray

    ended = []
    for name, namespace in RAY_DATA_ACTORS:
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError:  # none: no job ran here, or they were ended already
            continue
        ray.kill(actor, no_restart=True)
        ended.append(name)
    return ended
