"""TPU generations: the per-generation figures everything else is computed from.

Sources: the Google Cloud TPU pages for each generation (HBM, peak bf16) and xpk's
`system_characteristics.py` (GKE labels, machine types, naming). Every figure lives here once.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
GB = 1000**3


@dataclass(frozen=True)
class MachineType:
    """A GKE TPU machine type: how many chips one host (VM) has, and into how many containers
    (each one JAX process) a host may be split. The default layout is one container per host
    with every chip, as xpk 1.16 runs (`--use-parallel-containers` is opt-in there)."""

    name: str
    chips_per_host: int
    parallel_containers: int = 1  # containers per host the machine offers as an opt-in
    # Topologies this machine type can form. None: every topology of the generation with more
    # than one chip (the multi-host `-4t` types).
    topologies: frozenset[str] | None = None

    @property
    def layouts(self) -> tuple[int, ...]:
        """Containers per host this machine type can run: 1, and its parallel layout if any."""
        return (1,) if self.parallel_containers == 1 else (1, self.parallel_containers)

    def serves(self, topology: str, chips: int) -> bool:
        if self.topologies is not None:
            return topology in self.topologies
        return chips > 1 and chips % self.chips_per_host == 0


@dataclass(frozen=True)
class Generation:
    """One TPU generation and the rules that name and size its slices."""

    prefix: str                      # the name users type: `<prefix>-<N>` or `<prefix>-<topology>`
    aliases: tuple[str, ...]
    accelerator_label: str           # cloud.google.com/gke-tpu-accelerator
    tensorcores_per_chip: int        # N in `<prefix>-N` counts chips x this
    devices_per_chip: int            # JAX devices per chip (1 with megacore, 2 on tpu7x)
    topology_rank: int               # 2 (AxB) or 3 (AxBxC)
    hbm_bytes_per_chip: int
    peak_bf16_tflops_per_chip: float
    machine_types: tuple[MachineType, ...]   # first match for a topology is the default
    needs_workload_policy: bool      # multi-host slices need a Compute Engine workload policy
    device_kinds: tuple[str, ...]    # what `jax.devices()[0].device_kind` says on this generation

    @property
    def hbm_bytes_per_device(self) -> float:
        return self.hbm_bytes_per_chip / self.devices_per_chip

    @property
    def peak_bf16_tflops_per_device(self) -> float:
        return self.peak_bf16_tflops_per_chip / self.devices_per_chip

    def machine_types_for(self, topology: str, chips: int) -> list[MachineType]:
        return [m for m in self.machine_types if m.serves(topology, chips)]


_FOUR_CHIP_2D = frozenset({"2x2"})
_EIGHT_CHIP_2D = frozenset({"2x4"})

GENERATIONS: tuple[Generation, ...] = (
    Generation(
        prefix="v4", aliases=(), accelerator_label="tpu-v4-podslice",
        tensorcores_per_chip=2, devices_per_chip=1, topology_rank=3,
        hbm_bytes_per_chip=32 * GIB, peak_bf16_tflops_per_chip=275.0,
        machine_types=(MachineType("ct4p-hightpu-4t", 4),),
        needs_workload_policy=False, device_kinds=("TPU v4",),
    ),
    Generation(
        prefix="v5litepod", aliases=("v5e",), accelerator_label="tpu-v5-lite-podslice",
        tensorcores_per_chip=1, devices_per_chip=1, topology_rank=2,
        hbm_bytes_per_chip=16 * GB, peak_bf16_tflops_per_chip=197.0,
        machine_types=(
            MachineType("ct5lp-hightpu-1t", 1, topologies=frozenset({"1x1"})),
            MachineType("ct5lp-hightpu-4t", 4),
            MachineType("ct5lp-hightpu-8t", 8, topologies=_EIGHT_CHIP_2D),
        ),
        needs_workload_policy=False, device_kinds=("TPU v5 lite", "TPU v5e"),
    ),
    Generation(
        prefix="v5p", aliases=(), accelerator_label="tpu-v5p-slice",
        tensorcores_per_chip=2, devices_per_chip=1, topology_rank=3,
        hbm_bytes_per_chip=95 * GIB, peak_bf16_tflops_per_chip=459.0,
        machine_types=(MachineType("ct5p-hightpu-4t", 4),),
        needs_workload_policy=False, device_kinds=("TPU v5p", "TPU v5"),
    ),
    Generation(
        prefix="v6e", aliases=(), accelerator_label="tpu-v6e-slice",
        tensorcores_per_chip=1, devices_per_chip=1, topology_rank=2,
        hbm_bytes_per_chip=32 * GB, peak_bf16_tflops_per_chip=918.0,
        machine_types=(
            MachineType("ct6e-standard-1t", 1, topologies=frozenset({"1x1"})),
            MachineType("ct6e-standard-4t", 4),
            MachineType("ct6e-standard-8t", 8, topologies=_EIGHT_CHIP_2D),
        ),
        needs_workload_policy=False, device_kinds=("TPU v6 lite", "TPU v6e"),
    ),
    Generation(
        prefix="tpu7x", aliases=(), accelerator_label="tpu7x",
        tensorcores_per_chip=2, devices_per_chip=2, topology_rank=3,
        hbm_bytes_per_chip=192 * GIB, peak_bf16_tflops_per_chip=2307.0,
        machine_types=(
            MachineType("tpu7x-standard-1t", 1, topologies=frozenset({"1x1x1"})),
            # Opt-in: one container per NUMA node, each with 2 chips (xpk's
            # --use-parallel-containers names them <name>-1, <name>-2).
            MachineType("tpu7x-standard-4t", 4, parallel_containers=2),
        ),
        needs_workload_policy=True, device_kinds=("TPU7x", "TPU 7x", "TPU7"),
    ),
)

_BY_NAME: dict[str, Generation] = {
    name: g for g in GENERATIONS for name in (g.prefix, *g.aliases)
}


def find_generation(name: str) -> Generation | None:
    """The generation a slice-name prefix (or alias, such as `v5e`) names."""
    return _BY_NAME.get(name.lower())


def generation_names() -> list[str]:
    """Every prefix and alias users may type, in catalog order."""
    return list(_BY_NAME)


def generation_for_device_kind(device_kind: str) -> Generation | None:
    """The generation of a JAX device, from its `device_kind` string."""
    kind = device_kind.strip().lower()
    for g in GENERATIONS:
        if any(kind == k.lower() for k in g.device_kinds):
            return g
    return None


def peak_tflops_for_device_kind(device_kind: str) -> float | None:
    """Peak bf16 TFLOP/s of one JAX device of this kind, or None for a non-TPU device."""
    g = generation_for_device_kind(device_kind)
    return g.peak_bf16_tflops_per_device if g else None


def hbm_bytes_for_device_kind(device_kind: str) -> float | None:
    """HBM bytes of one JAX device of this kind, or None for a non-TPU device."""
    g = generation_for_device_kind(device_kind)
    return g.hbm_bytes_per_device if g else None
