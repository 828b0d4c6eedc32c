class ClusterError(Exception):
    """Something went wrong talking to the Kubernetes API server."""


class TransientClusterError(ClusterError):
    """Worth retrying: connection refused, timeouts, 409 conflicts, 429, 5xx."""


class PermanentClusterError(ClusterError):
    """Retrying will not help: the object is invalid (422) or forbidden (403)."""
