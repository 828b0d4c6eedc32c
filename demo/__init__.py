"""What `make run` adds to the local cluster for the demo: GPU metrics as a real cluster has
them (a DCGM exporter stand-in, Prometheus, the custom metrics API). Tooling: it stands on the
portal and the local cluster; nothing of the portal imports it."""
