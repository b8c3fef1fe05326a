"""A game's router over its versions: the sticky weighted split, failover between versions,
each version's breaker, and the room a version has for routed logins."""
