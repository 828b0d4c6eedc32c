"""GPU and MIG facts, read from the project's own `data/gpu_catalog.json`.

Pure Python (no Django, no I/O beyond reading the packaged JSON once) so that the portal, the
local cluster's MIG simulator and the planner share one source of placement truth.

Placement rule (NVIDIA MIG user guide, `nvidia-smi mig -lgipp`): a GPU instance of a profile
occupies `memory_slices` consecutive memory slices starting at one of its `placement_starts`;
the compute slices of all instances on a GPU add up to at most the GPU's compute slices; a
profile appears at most `max_instances` times.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from pathlib import Path

CATALOG_PATH = Path(__file__).with_name("data") / "gpu_catalog.json"

WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"


class UnknownModel(KeyError):
    pass


class UnknownProfile(KeyError):
    pass


@dataclass(frozen=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: int
    max_instances: int
    placement_starts: tuple[int, ...]
    resource_name: str
    media_extensions: bool

    @property
    def slug(self) -> str:
        """Profile name safe for slugs and label keys: `1g.10gb+me` -> `1g.10gb.me`."""
        return self.name.replace("+", ".")


@dataclass(frozen=True)
class GpuModel:
    key: str
    memory_gb: int
    memory_slices: int
    compute_slices: int
    mig_capable: bool
    product_label: str
    default_price_per_hour: Decimal | None
    profiles: dict[str, MigProfile] = field(default_factory=dict, compare=False)
    pci_device_ids: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        """`A100-80GB` -> `a100-80gb`; `H100-96GB (H100 on GH200 / H20)` -> `h100-96gb`."""
        return self.key.split(" ")[0].lower()

    def profile(self, name: str) -> MigProfile:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(self.profiles) or "none (not MIG-capable)"
            raise UnknownProfile(
                f"{self.key} has no MIG profile {name!r}; known profiles: {known}"
            ) from None

    def gpu_fraction(self, profile: MigProfile) -> Decimal:
        """GPU-equivalent of one instance: compute slices over the GPU's compute slices."""
        return Decimal(profile.compute_slices) / Decimal(self.compute_slices)


@cache
def load_catalog(path: Path = CATALOG_PATH) -> dict[str, GpuModel]:
    raw = json.loads(path.read_text())
    prices = raw.get("portal_default_price_usd_per_gpu_hour", {})
    labels = raw.get("portal_product_labels", {})
    models: dict[str, GpuModel] = {}
    for gpu in raw["gpus"]:
        profiles = {
            p["name"]: MigProfile(
                name=p["name"],
                compute_slices=p["compute_slices"],
                memory_slices=p["memory_slices"],
                memory_gb=p["memory_gb"],
                max_instances=p["max_instances"],
                placement_starts=tuple(p["placement_starts"]),
                resource_name=p["k8s_mixed_resource"],
                media_extensions=p.get("media_extensions", False),
            )
            for p in gpu["profiles"]
        }
        price = prices.get(gpu["model"])
        models[gpu["model"]] = GpuModel(
            key=gpu["model"],
            memory_gb=gpu["total_memory_gb"],
            memory_slices=gpu["memory_slices"],
            compute_slices=gpu["compute_slices"],
            mig_capable=gpu.get("mig_capable", bool(profiles)),
            product_label=labels.get(gpu["model"], f"NVIDIA-{gpu['model']}"),
            default_price_per_hour=Decimal(str(price)) if price is not None else None,
            profiles=profiles,
            pci_device_ids=tuple(gpu.get("pci_device_ids", ())),
        )
    return models


def get_model(key: str) -> GpuModel:
    catalog = load_catalog()
    if key in catalog:
        return catalog[key]
    for model in catalog.values():
        if model.slug == key.lower():
            return model
    raise UnknownModel(f"unknown GPU model {key!r}; known models: {', '.join(catalog)}")


def product_label(key: str, overrides: Mapping[str, str] | None = None) -> str:
    """GPU feature discovery's `nvidia.com/gpu.product` for a model (catalog key or slug): the
    platform's override (catalog key -> product, where its nodes say otherwise, e.g. a PCIe
    card), else the catalog's; a model the catalog does not know gets GFD's usual form
    `NVIDIA-<model>`."""
    overrides = overrides or {}
    try:
        model = get_model(key)
    except UnknownModel:
        return overrides.get(key, f"NVIDIA-{key}")
    return overrides.get(model.key, model.product_label)


def model_for_product_label(
    product: str, overrides: Mapping[str, str] | None = None
) -> GpuModel | None:
    """Map GPU feature discovery's `nvidia.com/gpu.product` (maybe with `-MIG-<profile>`) back
    to its model, with the same overrides as `product_label`: the two always agree."""
    base = product.split("-MIG-")[0]
    overrides = overrides or {}
    for model in load_catalog().values():
        if overrides.get(model.key, model.product_label) == base:
            return model
    return None


# --- placement -------------------------------------------------------------------------------

Placement = tuple[tuple[str, int], ...]  # ((profile name, start memory slice), ...) sorted


def _expand(model: GpuModel, devices: Mapping[str, int]) -> list[MigProfile]:
    wanted: list[MigProfile] = []
    for name, count in devices.items():
        if count < 0:
            raise ValueError(f"negative count for {name}")
        wanted.extend([model.profile(name)] * count)
    # Big instances first: they have the fewest starts, so the search fails fast.
    wanted.sort(key=lambda p: (-p.memory_slices, len(p.placement_starts), p.name))
    return wanted


def find_placement(model: GpuModel, devices: Mapping[str, int]) -> Placement | None:
    """A physical placement of the instances on one GPU, or None when they cannot be packed."""
    wanted = _expand(model, devices)  # raises UnknownProfile, also on non-MIG models
    if not wanted:
        return ()
    if sum(p.compute_slices for p in wanted) > model.compute_slices:
        return None
    if any(devices[p.name] > p.max_instances for p in wanted):
        return None

    used = [False] * model.memory_slices
    chosen: list[tuple[str, int]] = []

    def place(i: int) -> bool:
        if i == len(wanted):
            return True
        profile = wanted[i]
        # Identical profiles take increasing starts: avoids re-trying permutations.
        floor = chosen[-1][1] + 1 if i and wanted[i - 1] is profile else 0
        for start in profile.placement_starts:
            span = range(start, start + profile.memory_slices)
            if start < floor or span.stop > model.memory_slices or any(used[s] for s in span):
                continue
            for s in span:
                used[s] = True
            chosen.append((profile.name, start))
            if place(i + 1):
                return True
            chosen.pop()
            for s in span:
                used[s] = False
        return False

    return tuple(sorted(chosen, key=lambda c: c[1])) if place(0) else None


def can_pack(model: str | GpuModel, devices: Mapping[str, int]) -> bool:
    """True when one GPU of `model` can hold these MIG instances at once."""
    gpu = get_model(model) if isinstance(model, str) else model
    return find_placement(gpu, devices) is not None


def all_placements(model: GpuModel, profiles: Iterable[str] | None = None) -> set[Placement]:
    """Every physically valid placement (set of (profile, start)) on one GPU, the empty one too."""
    names = list(profiles) if profiles is not None else list(model.profiles)
    candidates = [(model.profile(n), s) for n in names for s in model.profile(n).placement_starts]
    results: set[Placement] = set()

    def grow(i: int, used: frozenset[int], compute: int, chosen: tuple, counts: Counter) -> None:
        results.add(tuple(sorted(chosen, key=lambda c: (c[1], c[0]))))
        for j in range(i, len(candidates)):
            profile, start = candidates[j]
            span = frozenset(range(start, start + profile.memory_slices))
            if (
                max(span) >= model.memory_slices
                or span & used
                or compute + profile.compute_slices > model.compute_slices
                or counts[profile.name] >= profile.max_instances
            ):
                continue
            counts[profile.name] += 1
            grow(
                j + 1,
                used | span,
                compute + profile.compute_slices,
                (*chosen, (profile.name, start)),
                counts,
            )
            counts[profile.name] -= 1

    grow(0, frozenset(), 0, (), Counter())
    return results


def maximal_placements(model: GpuModel, profiles: Iterable[str] | None = None) -> set[Placement]:
    """Placements to which no further instance of the given profiles can be added."""
    placements = all_placements(model, profiles)
    return {
        p
        for p in placements
        if not any(len(q) == len(p) + 1 and set(p) <= set(q) for q in placements)
    }


def as_multiset(placement: Placement) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(Counter(name for name, _ in placement).items()))


def packable_multisets(model: GpuModel, profiles: Iterable[str] | None = None) -> set:
    return {as_multiset(p) for p in all_placements(model, profiles)}


def maximal_multisets(model: GpuModel, profiles: Iterable[str] | None = None) -> set:
    """Packable multisets not contained in a larger packable multiset."""
    sets = packable_multisets(model, profiles)

    def contains(big: tuple, small: tuple) -> bool:
        b = dict(big)
        return all(b.get(name, 0) >= n for name, n in small)

    return {s for s in sets if not any(t != s and contains(t, s) for t in sets)}


# A shared class's unit is one replica of a time-sliced or MPS GPU: 1/4 GPU by default.
SHARED_REPLICAS = 4


def class_slug(model: GpuModel, kind: str, profile: str = "") -> str:
    """The one spelling of a resource class slug: `a100-80gb` (whole), `a100-80gb-shared`,
    `a100-80gb-mig-1g.10gb` (MIG; a `+me` profile is spelled `.me`). Kinds as ResourceClass.Kind."""
    if kind == "mig":
        return f"{model.slug}-mig-{profile.replace('+', '.')}"
    if kind == "shared":
        return f"{model.slug}-shared"
    return model.slug
