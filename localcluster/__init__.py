"""A real local Kubernetes control plane with simulated NVIDIA GPU nodes (KWOK), for tests and
development: `python -m localcluster {build,up,down,reset,status,fleet}`."""
