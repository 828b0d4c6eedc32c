"""The kinds of work a team runs (job, gang, inference service, autoscaling, topology), rendered
pure from a typed spec."""
