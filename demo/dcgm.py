"""A stand-in for NVIDIA's dcgm-exporter: serves DCGM-format series for the GPU pods that the
local cluster runs, in Prometheus' text format, on 127.0.0.1.

Every scrape lists the pods of the given namespaces through the gateway, and writes per device
what the real exporter writes: whole GPUs `DCGM_FI_DEV_GPU_UTIL` (%), MIG instances
`DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0-1) with `GPU_I_PROFILE` and `GPU_I_ID`, both
`DCGM_FI_DEV_FB_USED` (MiB), labelled `gpu`, `UUID`, `modelName`, `Hostname`, `namespace`,
`pod`, `container`. Tests set each pod's utilisation in `util`.

Health series are per GPU of a node, as the exporter writes them whether or not a pod holds the
GPU: tests set `gpu_health[(node, gpu_index)][metric] = value` (e.g. DCGM_FI_DEV_XID_ERRORS = 79,
the code of the last XID error; DCGM_FI_DEV_GPU_TEMP in degrees C), labelled `gpu`, `UUID`,
`device`, `modelName` and `Hostname` (the node).
"""

from __future__ import annotations

import threading
import uuid
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from scheduler.cluster import node_offers
from scheduler.cluster.kube import KubeGateway

PRODUCT = {"A100-80GB": "NVIDIA A100-SXM4-80GB", "H100-80GB": "NVIDIA H100 80GB HBM3"}


def _labels(**labels: str) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return "{" + inner + "}"


class DcgmStandin:
    def __init__(self, kube: KubeGateway, namespaces: set[str] | None = None):
        self.kube = kube
        self.namespaces = namespaces if namespaces is not None else set()
        self.util: dict[tuple[str, str], Decimal] = {}  # (namespace, pod) -> 0-1
        self.fb_used_mib: dict[tuple[str, str], int] = {}
        self.gpu_health: dict[tuple[str, str], dict[str, float]] = {}
        self.scrapes = 0
        self.last_error: str = ""
        self._server: ThreadingHTTPServer | None = None

    def render(self) -> str:
        lines = [
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
            "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.",
            "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge",
            "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
            "# TYPE DCGM_FI_DEV_FB_USED gauge",
        ]
        nodes = {}
        for ns in sorted(self.namespaces):
            for pod in self.kube.list("Pod", ns):
                info = node_offers.parse_gpu_pod(pod)
                if info is None or info.phase != "Running":
                    continue
                if info.node_name not in nodes:
                    node = self.kube.get("Node", info.node_name) or {}
                    nodes[info.node_name] = node_offers.parse_node(node).gpu_model if node else ""
                model = nodes[info.node_name]
                key = (info.namespace, info.name)
                util = self.util.get(key, Decimal(0))
                fb = self.fb_used_mib.get(key, 1024)
                device = 0
                for resource, units in sorted(info.resources.items()):
                    for _ in range(units):
                        common = dict(
                            gpu=str(device),
                            UUID=f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, info.uid + str(device))}",
                            device=f"nvidia{device}",
                            modelName=PRODUCT.get(model, f"NVIDIA {model}"),
                            Hostname=info.node_name,
                            container="main",
                            namespace=info.namespace,
                            pod=info.name,
                        )
                        if resource.startswith(node_offers.MIG_PREFIX):
                            mig = dict(
                                common,
                                GPU_I_PROFILE=resource[len(node_offers.MIG_PREFIX) :],
                                GPU_I_ID=str(device + 1),
                            )
                            lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{_labels(**mig)} {util}")
                            lines.append(f"DCGM_FI_DEV_FB_USED{_labels(**mig)} {fb}")
                        else:
                            lines.append(f"DCGM_FI_DEV_GPU_UTIL{_labels(**common)} {util * 100}")
                            lines.append(f"DCGM_FI_DEV_FB_USED{_labels(**common)} {fb}")
                        device += 1
        return "\n".join(lines + self._health_lines()) + "\n"

    def _health_lines(self) -> list[str]:
        """One family per metric (the text format wants each family's samples together)."""
        families: dict[str, list[str]] = {}
        for (node, gpu), metrics in sorted(dict(self.gpu_health).items()):
            labels = _labels(
                gpu=gpu,
                UUID=f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, node + '/' + gpu)}",
                device=f"nvidia{gpu}",
                modelName="NVIDIA B200",
                Hostname=node,
            )
            for metric, value in sorted(dict(metrics).items()):
                families.setdefault(metric, []).append(f"{metric}{labels} {value}")
        lines = []
        for metric, samples in families.items():
            lines.append(f"# TYPE {metric} gauge")
            lines += samples
        return lines

    def start(self) -> int:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                try:
                    body = standin.render().encode()
                except Exception as exc:  # an answer Prometheus records as a failed scrape
                    standin.last_error = repr(exc)
                    self.send_error(500, str(exc)[:200])
                    return
                standin.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self._server.server_address[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
