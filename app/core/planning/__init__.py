"""Planning before anything serves: where each member is scored (the layout, from measured
predict costs) and how many replicas a load needs."""
