"""A one-shot HTTP probe from a pod on the real node, for what must be asked from inside the
cluster (a Service's ClusterIP name, across the NetworkPolicies of a namespace)."""

from localcluster import images, realnode
from tests.scheduler.cluster_helpers import unique_slug, wait_for

DEMO = images.demo_python_ref()

PROBE = """
import sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1])
for pair in sys.argv[2:]:
    request.add_header(*pair.split("=", 1))
for attempt in range(60):
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            print(resp.status, resp.read().decode()); break
    except urllib.error.HTTPError as exc:
        print(exc.code, "refused"); break
    except OSError as exc:
        import time; time.sleep(2)
else:
    print("000 no answer", exc)
"""


def fetch_from_pod(core, namespace: str, url: str, headers: dict[str, str]) -> str:
    """GET `url` (with `headers`) from a pod of `namespace` on the real node, retried while
    nothing answers: "<status> <body>", its one line of log."""
    name = f"probe-{unique_slug('st')}"
    args = [f"{k}={v}" for k, v in headers.items()]
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "nodeName": realnode.NODE_NAME,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "probe",
                        "image": DEMO,
                        "imagePullPolicy": "Never",
                        "command": ["python", "-c", PROBE, url, *args],
                    }
                ],
            },
        },
    )
    try:
        wait_for(
            f"{name} done",
            lambda: (
                core.read_namespaced_pod(name, namespace).status.phase in ("Succeeded", "Failed")
            ),
            timeout=150,
        )
        return core.read_namespaced_pod_log(name, namespace).strip()
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
