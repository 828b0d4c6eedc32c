"""The FGD paper's published results, per workload variant of the trace: data with its source.

Source: the expected results of the paper's simulator, hkust-adsl/kubernetes-scheduler-simulator,
`experiments/analysis/expected_results/analysis_allo_discrete.csv` (file commit 1853fc0e, May
2023; read at repository commit 8f3d6417), the results of Weng et al., "Beware of Fragmentation:
Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", ATC'23. That file has one
row per (workload, policy, seed 42..51), all on the 6,212-GPU `openb` fleet, pods sampled until
130 % of the fleet's GPU capacity is requested, never deleted; its column `N` is the allocation
(allocated GPU milli ÷ total GPU milli, in %) once the arrived pods request N % of capacity
(`experiments/README.md`, "Analysis & Merge"). So ρ = 1.0 is column `100` and ρ = 1.3 is column
`130` of the same runs.

Each figure below is the mean over the file's ten seeds of that column, rounded to 2 decimals
(the `default` rows at ρ = 1.3 are the paper's 87.47 … 95.39). Nothing here is measured by the
project. Workloads the simulator's `data/csv/` carries but the file has no rows for (cpu037,
cpu072, cpu235, cpu300, gpushare20, gpuspec05) are not published: `published_rows` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SOURCE = (
    "hkust-adsl/kubernetes-scheduler-simulator, experiments/analysis/expected_results/"
    "analysis_allo_discrete.csv (commit 1853fc0e), mean of seeds 42–51; Weng et al., ATC'23"
)
PUBLISHED_GPUS = 6212  # `total_gpus` of every row of the source
PUBLISHED_RHOS = (1.0, 1.3)  # the columns kept: 100 and 130

# workload -> policy -> (A_req % at ρ = 1.0, A_req % at ρ = 1.3); policies in the source's order.
PUBLISHED: dict[str, dict[str, tuple[float, float]]] = {
    "openb_pod_list_cpu050": {
        "random": (89.02, 91.24),
        "dot-product": (93.03, 93.27),
        "GPU clustering": (93.52, 93.79),
        "GPU packing": (93.46, 93.72),
        "best-fit": (93.56, 93.79),
        "FGD": (95.00, 95.21),
    },
    "openb_pod_list_cpu100": {
        "random": (87.44, 89.11),
        "dot-product": (91.73, 91.95),
        "GPU clustering": (92.42, 92.64),
        "GPU packing": (92.50, 92.72),
        "best-fit": (93.26, 93.44),
        "FGD": (95.21, 95.35),
    },
    "openb_pod_list_cpu200": {
        "random": (83.03, 83.77),
        "dot-product": (87.45, 87.70),
        "GPU clustering": (89.67, 89.92),
        "GPU packing": (89.98, 90.22),
        "best-fit": (92.15, 92.40),
        "FGD": (94.82, 95.05),
    },
    "openb_pod_list_cpu250": {
        "random": (80.00, 80.42),
        "dot-product": (83.57, 83.81),
        "GPU clustering": (87.75, 87.99),
        "GPU packing": (88.05, 88.28),
        "best-fit": (91.21, 91.45),
        "FGD": (93.20, 93.41),
    },
    "openb_pod_list_default": {
        "random": (86.30, 87.47),
        "dot-product": (90.62, 90.85),
        "GPU clustering": (91.65, 91.88),
        "GPU packing": (91.78, 92.00),
        "best-fit": (92.86, 93.08),
        "FGD": (95.23, 95.39),
    },
    "openb_pod_list_gpushare100": {
        "random": (78.90, 79.44),
        "dot-product": (81.98, 82.42),
        "GPU clustering": (82.22, 82.65),
        "GPU packing": (82.13, 82.57),
        "best-fit": (84.62, 85.01),
        "FGD": (86.64, 86.90),
    },
    "openb_pod_list_gpushare40": {
        "random": (84.86, 86.00),
        "dot-product": (89.30, 89.56),
        "GPU clustering": (89.76, 90.02),
        "GPU packing": (89.77, 90.03),
        "best-fit": (91.44, 91.69),
        "FGD": (93.96, 94.15),
    },
    "openb_pod_list_gpushare60": {
        "random": (82.81, 83.65),
        "dot-product": (86.82, 87.11),
        "GPU clustering": (86.90, 87.20),
        "GPU packing": (87.15, 87.45),
        "best-fit": (89.06, 89.36),
        "FGD": (91.25, 91.40),
    },
    "openb_pod_list_gpushare80": {
        "random": (80.62, 81.22),
        "dot-product": (84.14, 84.49),
        "GPU clustering": (84.50, 84.85),
        "GPU packing": (84.65, 85.00),
        "best-fit": (86.66, 87.01),
        "FGD": (89.08, 89.30),
    },
    "openb_pod_list_gpuspec10": {
        "random": (86.26, 87.43),
        "dot-product": (90.17, 90.39),
        "GPU clustering": (91.96, 92.18),
        "GPU packing": (92.24, 92.46),
        "best-fit": (93.10, 93.30),
        "FGD": (94.66, 94.95),
    },
    "openb_pod_list_gpuspec20": {
        "random": (85.90, 87.24),
        "dot-product": (88.29, 89.97),
        "GPU clustering": (89.11, 92.25),
        "GPU packing": (89.28, 92.94),
        "best-fit": (88.46, 93.30),
        "FGD": (94.66, 94.84),
    },
    "openb_pod_list_gpuspec25": {
        "random": (85.42, 86.94),
        "dot-product": (85.44, 89.63),
        "GPU clustering": (86.41, 92.08),
        "GPU packing": (86.77, 92.98),
        "best-fit": (85.67, 93.23),
        "FGD": (93.91, 94.74),
    },
    "openb_pod_list_gpuspec33": {
        "random": (83.87, 86.46),
        "dot-product": (79.82, 89.14),
        "GPU clustering": (81.09, 92.12),
        "GPU packing": (82.22, 93.22),
        "best-fit": (80.39, 93.09),
        "FGD": (87.84, 94.55),
    },
    "openb_pod_list_multigpu20": {
        "random": (86.92, 88.69),
        "dot-product": (91.85, 92.06),
        "GPU clustering": (93.34, 93.56),
        "GPU packing": (93.50, 93.71),
        "best-fit": (93.73, 93.93),
        "FGD": (95.53, 95.65),
    },
    "openb_pod_list_multigpu30": {
        "random": (86.63, 89.27),
        "dot-product": (93.11, 93.28),
        "GPU clustering": (94.55, 94.72),
        "GPU packing": (94.70, 94.87),
        "best-fit": (94.57, 94.72),
        "FGD": (96.36, 96.46),
    },
    "openb_pod_list_multigpu40": {
        "random": (85.38, 90.09),
        "dot-product": (94.04, 94.19),
        "GPU clustering": (95.35, 95.50),
        "GPU packing": (95.59, 95.74),
        "best-fit": (95.10, 95.23),
        "FGD": (96.91, 96.99),
    },
    "openb_pod_list_multigpu50": {
        "random": (81.28, 90.27),
        "dot-product": (94.73, 94.85),
        "GPU clustering": (95.69, 95.81),
        "GPU packing": (96.06, 96.18),
        "best-fit": (95.62, 95.74),
        "FGD": (97.09, 97.18),
    },
}


@dataclass(frozen=True)
class PublishedRow:
    policy: str
    a_req: float  # %, as published
    gpus: int  # the published fleet's GPUs

    @property
    def unallocated_gpus(self) -> float:
        """(1 − A_req) · #GPUs, as the paper counts unallocated GPUs (FGD's 286 on `default`)."""
        return (1 - self.a_req / 100) * self.gpus


def workload_of(pods_file: Path | str) -> str:
    """The workload a pod list is, by its file name: `openb_pod_list_gpuspec10.csv` ->
    `openb_pod_list_gpuspec10`, the source's `workload` column."""
    return Path(pods_file).stem


def published_rows(workload: str, rho: float) -> list[PublishedRow] | None:
    """The published rows of this workload at this load, or None when none are published (a
    workload the source has no rows for, or a load other than 1.0 and 1.3)."""
    by_policy = PUBLISHED.get(workload)
    column = next((i for i, r in enumerate(PUBLISHED_RHOS) if abs(r - rho) < 1e-9), None)
    if by_policy is None or column is None:
        return None
    return [PublishedRow(p, values[column], PUBLISHED_GPUS) for p, values in by_policy.items()]
