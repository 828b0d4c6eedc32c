"""The one door to the Kubernetes API. Everything else hands it plain manifests (dicts) or asks it
plain questions; only this module imports the `kubernetes` client.

Writes use server-side apply with one field manager; every call is counted so tests and
benchmarks can prove that a no-op reconcile writes nothing.
"""

from __future__ import annotations

import builtins
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import urllib3
import yaml
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from core.errors import PermanentClusterError, TransientClusterError
from scheduler.cluster import kueue_settings, support
from scheduler.cluster.served_kinds import KINDS

FIELD_MANAGER = "gpu-portal"


TRANSIENT_STATUSES = {409, 429, 500, 502, 503, 504}
WRITE_VERBS = frozenset({"apply", "patch", "delete"})


class ClusterForbidden(PermanentClusterError):
    """403: the portal's account may not do this."""


@dataclass
class CallStats:
    """Every call the gateway made, by (verb, kind). Safe across threads: a reconcile applies
    from several at once, and `tally` says what one thread's run cost meanwhile."""

    calls: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _open: threading.local = field(default_factory=threading.local, repr=False, compare=False)

    def count(self, verb: str, kind: str) -> None:
        with self._lock:
            self.calls[(verb, kind)] += 1
        for tally in getattr(self._open, "tallies", ()):
            tally.count(verb, kind)

    @contextmanager
    def tally(self) -> Iterator[CallStats]:
        """The calls this thread makes inside the block, whatever other threads call."""
        mine = CallStats()
        opened = self._open.__dict__.setdefault("tallies", [])
        opened.append(mine)
        try:
            yield mine
        finally:  # by identity: two tallies with the same counts are equal
            opened[:] = [other for other in opened if other is not mine]

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.calls.values())

    @property
    def writes(self) -> int:
        with self._lock:
            return sum(n for (verb, _), n in self.calls.items() if verb in WRITE_VERBS)


def _path(kind: str, name: str | None = None, namespace: str | None = None, sub: str = "") -> str:
    k = KINDS[kind]
    path = k.api
    if k.namespaced and namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{k.plural}"
    if name:
        path += f"/{name}"
    if sub:
        path += f"/{sub}"
    return path


# An API server that is starting answers before it has loaded its RBAC bindings, with 403s for
# what the portal may do (seen on the local cluster a second after a restart: a reconcile retried
# into it failed "for good"). A 403 this soon after the same gateway could not reach the API
# server is therefore tried again, as the outage itself was.
WARMING_UP_S = 60.0


def _translate(exc: Exception, what: str, since_unreachable: float | None = None) -> Exception:
    """The portal's error for a failed call; `since_unreachable`: seconds since this gateway
    last could not reach the API server (None: not lately)."""
    if isinstance(exc, ApiException):
        detail = exc.reason
        try:
            detail = json.loads(exc.body).get("message", detail)
        except (TypeError, ValueError):
            pass
        message = f"{what}: {exc.status} {detail}"
        if exc.status in TRANSIENT_STATUSES:
            return TransientClusterError(message)
        if exc.status != 403:
            return PermanentClusterError(message)
        if since_unreachable is not None and since_unreachable < WARMING_UP_S:
            return TransientClusterError(
                f"{message} (the API server was unreachable moments ago and may still be "
                "loading its authorization: tried again)"
            )
        return ClusterForbidden(message)
    return TransientClusterError(f"{what}: cannot reach the API server ({exc.__class__.__name__})")


def _selectors(label_selector: str, field_selector: str) -> list[tuple[str, str]]:
    query = [("labelSelector", label_selector), ("fieldSelector", field_selector)]
    return [(k, v) for k, v in query if v]


class ResourceVersionGone(PermanentClusterError):
    """A watch asked for history the API server no longer keeps (410 Gone, "too old resource
    version"): list again and watch from the list's resourceVersion."""


class KubeGateway:
    """A thin, counted REST client over one cluster."""

    def __init__(self, api_client: client.ApiClient):
        self.api = api_client
        self.stats = CallStats()
        self._unreachable_at: float | None = None  # monotonic: its last call that found no server
        self.cluster_objects_at = float("-inf")  # when cluster-wide objects were last converged
        # Nothing is written to a cluster below the supported versions (read at the first write).
        self.support = support.SupportCheck(self._support_facts)
        # Whether the running Kueue holds teams' work to the queue (said, never refused).
        self.kueue_settings = kueue_settings.KueueSettingsCheck(self._kueue_settings_facts)

    def _error(self, exc: Exception, what: str) -> Exception:
        if not isinstance(exc, ApiException):
            self._unreachable_at = time.monotonic()
        since = None if self._unreachable_at is None else time.monotonic() - self._unreachable_at
        return _translate(exc, what, since)

    @classmethod
    def configured(cls) -> KubeGateway:
        """The cluster the settings name: the KUBECONFIG file, or, when it is empty (the
        production default), the pod's own ServiceAccount (in-cluster configuration)."""
        if settings.KUBECONFIG:
            return cls.from_kubeconfig(settings.KUBECONFIG)
        return cls.in_cluster()

    @classmethod
    def from_kubeconfig(cls, path: str | None = None) -> KubeGateway:
        cfg = client.Configuration()
        path = path or settings.KUBECONFIG
        try:
            config.load_kube_config(config_file=path, client_configuration=cfg)
        except (config.ConfigException, OSError) as exc:
            raise PermanentClusterError(
                f"cannot read the kubeconfig {path} ({exc}); set KUBECONFIG to a kubeconfig file"
            ) from exc
        return cls._with(cfg)

    @classmethod
    def from_kubeconfig_text(cls, text: str) -> KubeGateway:
        """A registered cluster's door, from the kubeconfig in its Secret (checked first by
        scheduler/cluster/credentials.py: certificates embedded, no file read)."""
        cfg = client.Configuration()
        try:
            config.load_kube_config_from_dict(
                yaml.safe_load(text), client_configuration=cfg, persist_config=False
            )
        except (config.ConfigException, yaml.YAMLError, TypeError, ValueError) as exc:
            raise PermanentClusterError(f"cannot use the kubeconfig ({exc})") from exc
        return cls._with(cfg)

    @classmethod
    def in_cluster(
        cls,
        token_file: str = config.incluster_config.SERVICE_TOKEN_FILENAME,
        ca_file: str = config.incluster_config.SERVICE_CERT_FILENAME,
        environ: Mapping[str, str] | None = None,
    ) -> KubeGateway:
        """The pod's ServiceAccount: the API server from KUBERNETES_SERVICE_HOST/PORT, the
        projected token (re-read as the kubelet rotates it) and the cluster's CA."""
        cfg = client.Configuration()
        try:
            config.incluster_config.InClusterConfigLoader(
                token_filename=token_file,
                cert_filename=ca_file,
                environ=os.environ if environ is None else environ,
            ).load_and_set(cfg)
        except config.ConfigException as exc:
            raise PermanentClusterError(
                f"no cluster configured: KUBECONFIG is empty and this is not a pod with a "
                f"ServiceAccount ({exc}); set KUBECONFIG to a kubeconfig file"
            ) from exc
        return cls._with(cfg)

    @classmethod
    def _with(cls, cfg: client.Configuration) -> KubeGateway:
        cfg.retries = False  # retries are the task layer's job, with backoff and jitter
        # connections kept for reuse: the workload sync alone holds its 5 watches open while its
        # wide reading makes 9 lists at once and its threads sync (SYNC_WORKLOADS_THREADS); past
        # the pool, a call opens a new TLS connection and drops it after
        cfg.connection_pool_maxsize = 32
        return cls(client.ApiClient(cfg))

    def _call(
        self,
        verb: str,
        kind: str,
        method: str,
        path: str,
        *,
        body=None,
        query=None,
        content_type: str = "application/json",
    ) -> Any:
        if verb in WRITE_VERBS:
            self.support.require()
        self.stats.count(verb, kind)
        try:
            data = self.api.call_api(
                path,
                method,
                query_params=query or [],
                body=body,
                header_params={"Accept": "application/json", "Content-Type": content_type},
                auth_settings=["BearerToken"],
                response_type="object",
                _return_http_data_only=True,
                _preload_content=True,
                _request_timeout=(5, 30),
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            if isinstance(exc, ApiException) and exc.status == 404 and verb in ("get", "delete"):
                return None
            raise self._error(exc, f"{verb} {kind} {path}") from exc
        return data

    # --- reads ----------------------------------------------------------------------------

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        return self._call("get", kind, "GET", _path(kind, name, namespace))

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[dict]:
        query = _selectors(label_selector, field_selector)
        data = self._call("list", kind, "GET", _path(kind, namespace=namespace), query=query)
        items = data.get("items", []) if data else []
        for item in items:  # lists omit kind on items; callers compare by kind
            item.setdefault("kind", kind)
        return items

    def list_versioned(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
    ) -> tuple[builtins.list[dict], str]:  # `list` here is the method above
        """A list and the collection's resourceVersion: where a watch of the same collection
        starts so that it misses nothing after this list. With `limit`, only the first page:
        enough to take a cursor without reading the whole collection."""
        query = _selectors(label_selector, field_selector)
        if limit:
            query.append(("limit", str(limit)))
        data = self._call("list", kind, "GET", _path(kind, namespace=namespace), query=query) or {}
        items = data.get("items", [])
        for item in items:
            item.setdefault("kind", kind)
        return items, (data.get("metadata") or {}).get("resourceVersion", "")

    def stream(
        self,
        kind: str,
        resource_version: str,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        timeout_s: int = 3,
    ) -> Iterator[dict]:
        """What changes in a collection from `resource_version` on, event by event as it
        arrives (bookmarks too), until the server closes the watch after `timeout_s`. Raises
        `ResourceVersionGone` when the server no longer has that history (410): the caller
        lists again. The API server sends its bookmark about 2 s before the watch's deadline,
        so below 3 s a quiet collection's cursor does not move."""
        self.stats.count("watch", kind)
        what = f"watch {kind} {_path(kind, namespace=namespace)}"
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_s)),
            *_selectors(label_selector, field_selector),
        ]
        try:
            resp = self.api.call_api(
                _path(kind, namespace=namespace),
                "GET",
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
                _request_timeout=(5, timeout_s + 30),
            )
            try:
                for line in iter_resp_lines(resp):
                    if not line:
                        continue
                    event = json.loads(line)
                    obj = event["object"] = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            raise ResourceVersionGone(f"{what}: {obj.get('message', 'gone')}")
                        message = f"{what}: {obj.get('code')} {obj.get('message', '')}"
                        if obj.get("code") in TRANSIENT_STATUSES:
                            raise TransientClusterError(message)
                        raise PermanentClusterError(message)
                    if event.get("type") != "BOOKMARK":
                        obj.setdefault("kind", kind)
                    yield event
            finally:
                resp.release_conn()
        except ApiException as exc:
            if exc.status == 410:
                raise ResourceVersionGone(f"{what}: 410 {exc.reason}") from exc
            raise self._error(exc, what) from exc
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise self._error(exc, what) from exc

    def pod_log(self, name: str, namespace: str, *, tail_lines: int = 500) -> str:
        self.stats.count("get", "PodLog")
        try:
            return client.CoreV1Api(self.api).read_namespaced_pod_log(
                name, namespace, tail_lines=tail_lines, _request_timeout=(5, 30)
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._error(exc, f"logs of pod {namespace}/{name}") from exc

    def server_version(self) -> str:
        data = self._call("get", "Version", "GET", "/version")
        return data.get("gitVersion", "") if data else ""

    def _support_facts(self) -> tuple[str, dict | None, bool]:
        """What support.judge reads: the server's version and Kueue's ClusterQueue CRD."""
        version = self.server_version()
        try:
            return version, self.get("CustomResourceDefinition", support.KUEUE_PROBE_CRD), True
        except ClusterForbidden:
            return version, None, False

    def _kueue_settings_facts(
        self, namespace: str, name: str, crds: tuple[str, ...]
    ) -> kueue_settings.Facts:
        """What kueue_settings.judge reads: Kueue's ConfigMap and whether each CRD is there.
        A ConfigMap the portal may not read (or any refusal) is a fact to report, not a crash."""
        config_map, error = None, ""
        try:
            config_map = self.get("ConfigMap", name, namespace)
        except PermanentClusterError as exc:
            error = str(exc)
        served: dict[str, bool | None] = {}
        for crd in crds:
            try:
                served[crd] = self.get("CustomResourceDefinition", crd) is not None
            except ClusterForbidden:
                served[crd] = None
        return kueue_settings.Facts(config_map, error, served)

    # --- writes ---------------------------------------------------------------------------

    def apply(self, manifest: dict) -> dict:
        """Server-side apply with the portal's field manager; takes over conflicting fields, since
        the portal is the owner of what it renders."""
        kind = manifest["kind"]
        meta = manifest["metadata"]
        return self._call(
            "apply",
            kind,
            "PATCH",
            _path(kind, meta["name"], meta.get("namespace")),
            body=manifest,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )

    def apply_status(self, manifest: dict) -> dict:
        kind = manifest["kind"]
        meta = manifest["metadata"]
        return self._call(
            "apply",
            kind,
            "PATCH",
            _path(kind, meta["name"], meta.get("namespace"), "status"),
            body=manifest,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )

    def create(self, manifest: dict, *, dry_run: bool = False) -> dict:
        """POST; with dry_run the API server runs every admission check and stores nothing."""
        kind = manifest["kind"]
        ns = manifest["metadata"].get("namespace")
        query = [("dryRun", "All")] if dry_run else None
        return self._call(
            "apply", kind, "POST", _path(kind, namespace=ns), body=manifest, query=query
        )

    def merge_patch(self, kind: str, name: str, patch: dict, namespace: str | None = None) -> dict:
        return self._call(
            "patch",
            kind,
            "PATCH",
            _path(kind, name, namespace),
            body=patch,
            content_type="application/merge-patch+json",
        )

    def evict(self, name: str, namespace: str) -> str:
        """Ask to evict a pod through the Eviction API, which honours PodDisruptionBudgets:
        "evicted", "blocked" (a budget allows no disruption now: 429) or "gone"."""
        self.support.require()
        self.stats.count("create", "Eviction")
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        try:
            self.api.call_api(
                _path("Pod", name, namespace, sub="eviction"),
                "POST",
                body=body,
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                auth_settings=["BearerToken"],
                response_type="object",
                _return_http_data_only=True,
                _request_timeout=(5, 30),
            )
        except ApiException as exc:
            if exc.status == 404:
                return "gone"
            if exc.status == 429:
                return "blocked"
            raise self._error(exc, f"evict pod {namespace}/{name}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._error(exc, f"evict pod {namespace}/{name}") from exc
        return "evicted"

    def delete(
        self, kind: str, name: str, namespace: str | None = None, *, propagation: str = "Background"
    ) -> bool:
        """Delete; True when something was deleted, False when it was already gone."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        return (
            self._call("delete", kind, "DELETE", _path(kind, name, namespace), body=body)
            is not None
        )


_gateway: KubeGateway | None = None
_lock = threading.Lock()


def gateway() -> KubeGateway:
    """The process's gateway for the configured cluster (created on first use)."""
    global _gateway
    with _lock:
        if _gateway is None:
            _gateway = KubeGateway.configured()
        return _gateway


def reset_gateway() -> None:
    global _gateway
    with _lock:
        _gateway = None
