"""Human-readable output of `tpujob plan`: an aligned summary table, then the mesh and memory
details a person needs to act on."""

from __future__ import annotations

from tpujob.planning import SliceResult, layouts
from tpujob_plan.mesh import format_axes

GIB = 1024**3


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(headers)] + [line(r) for r in rows]


def render_table(results: list[SliceResult], compiled: dict[str, dict] | None = None) -> str:
    """The table and each slice's details; `compiled`: `tpujob plan --compile`'s figures by
    requested name, printed under the estimate."""
    ok = [r for r in results if r.ok and not r.plan.is_gpu]
    gpus = [r for r in results if r.ok and r.plan.is_gpu]
    lines: list[str] = []
    if gpus:
        lines += _gpu_table(gpus)
    for r in gpus:
        lines += _gpu_details(r)
    if ok:
        lines += [""] if lines else []
        headers = ["SLICE", "TOPOLOGY", "MACHINE TYPE", "SLICES", "HOSTS", "CHIPS", "DEVICES",
                   "DEV/HOST", "PROCESSES", "HBM/DEV", "PEAK/DEV", "WORKLOAD POLICY"]
        rows = []
        for r in ok:
            p = r.plan
            assert p is not None
            rows.append([p.slice_type.name, p.slice_type.topology, p.machine_type.name,
                         str(p.slices), str(p.hosts), str(p.slice_type.chips),
                         str(p.slice_type.devices), str(p.devices_per_host), str(p.processes),
                         f"{p.hbm_bytes_per_device / GIB:.1f} GiB",
                         f"{p.peak_tflops_per_device:g} TFLOP/s", p.workload_policy or "-"])
        lines += _table(headers, rows, right={3, 4, 5, 6, 7, 8, 9, 10})
    for r in ok:
        lines += _details(r)
        if compiled and r.requested in compiled:
            from tpujob.cli.plan_compile import compile_lines
            lines += compile_lines(r, compiled[r.requested])
    return "\n".join(lines)


def _gpu_table(results: list[SliceResult]) -> list[str]:
    headers = ["MACHINE TYPE", "GPU", "NODES", "GPUS", "GPU/NODE", "LAUNCHER", "PROCESSES",
               "MEM/GPU", "PEAK/GPU", "NETWORK"]
    rows = []
    for r in results:
        p = r.plan
        m = p.machine
        rows.append([m.name, m.gpu, str(p.nodes), str(p.devices), str(m.gpus_per_node),
                     p.launcher.value, str(p.processes),
                     f"{p.hbm_bytes_per_device / GIB:.1f} GiB",
                     f"{p.peak_tflops_per_device:g} TFLOP/s",
                     f"{m.network.value.upper()} x{m.gpu_nics}"])
    return _table(headers, rows, right={2, 3, 4, 6, 7, 8})


def _gpu_details(r: SliceResult) -> list[str]:
    from tpujob.builders.gpu_network import default_networks
    from tpujob.planning import gpu_dict

    p = r.plan
    m = p.machine
    launchers = gpu_dict(r.requested, p)["launchers"]
    out = ["", f"{m.name} x {p.nodes} ({m.series}, {m.gpu}; xpk --device-type "
               f"{m.device_type}):"]
    out.append("  processes       " + ", ".join(
        f"{name} {n}" + (" (one per node)" if name == "jax" else " (one per GPU)")
        + ("   <- planned" if name == p.launcher.value else "")
        for name, n in launchers.items()))
    selector = ", ".join(f"{k}={v}" for k, v in p.node_selector.items())
    out.append(f"  node selector   {selector}")
    out.append(f"  resources       nvidia.com/gpu: {m.gpus_per_node} per node (one container)")
    out.append(f"  network         {_NETWORKS[m.network.value]}; GPU NICs on "
               f"{', '.join(default_networks(m))} (spec.gpuNetworks to change)")
    out += _mesh_and_memory(r)
    return out


_NETWORKS = {"tcpx": "GPUDirect-TCPX, tcpx-daemon sidecar",
             "tcpxo": "GPUDirect-TCPXO, tcpxo-daemon sidecar",
             "rdma": "GPUDirect RDMA, NCCL gIB plugin from the node"}


def _mesh_and_memory(r: SliceResult) -> list[str]:
    p = r.plan
    out = []
    if r.mesh_requested and r.mesh is not None:
        m = r.mesh
        if m.valid:
            dcn = f"   dcn {format_axes(m.dcn)}" if p.mesh_granules > 1 else ""
            physical = (f"(physical {'x'.join(map(str, p.physical_mesh))})"
                        if p.physical_mesh else "(any layout within a node)")
            out.append(f"  mesh            valid: ici {format_axes(m.ici)}{dcn}   {physical}")
        else:
            out.append(f"  mesh            INVALID: {m.error}")
            if m.suggestions:
                tries = " | ".join(format_axes(s) for s in m.suggestions)
                out.append(f"  try             --ici {tries}")
    if r.memory is not None and r.model is not None:
        out += _memory_lines(r)
    if r.model_states is not None and r.model is not None:
        out += _model_state_lines(r)
    return out


def params(n: float) -> str:
    """A parameter count: billions to two decimals from 0.1 B up, else millions to three
    significant digits (a 0.8 M-parameter test model is not "0.00 B")."""
    return f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n / 1e6:.3g} M"


def _model_state_lines(r: SliceResult) -> list[str]:
    s, m = r.model_states, r.model
    how = "no offload" if s.zero.offload.value == "none" else f"offload {s.zero.offload.value}"
    verdict = "fits" if s.problem is None else "DOES NOT FIT"
    out = [f"  model           {m.label}: {params(s.parameters)} params, largest layer "
           f"{s.largest_layer / 1e6:.0f} M",
           f"  model states    ZeRO stage {s.zero.stage} ({how}): {s.bytes_per_gpu / GIB:.2f} "
           f"GiB per GPU of {r.plan.hbm_bytes_per_device / GIB:.2f} GiB, before activations: "
           f"{verdict}"]
    if s.problem is not None:
        out.append("  to fit          " + s.problem.rsplit("would fit: ", 1)[-1])
    return out


def _details(r: SliceResult) -> list[str]:
    p = r.plan
    assert p is not None
    out = ["", f"{p.slice_type.name} ({p.slice_type.topology_name}):"]
    for layout in layouts(p):
        chosen = "   <- planned" if layout.containers_per_host == p.containers_per_host else ""
        option = ("default" if layout.containers_per_host == 1
                  else f"opt-in: containersPerHost {layout.containers_per_host}")
        if len(p.machine_type.layouts) > 1:
            out.append(f"  layout          {layout.containers_per_host} container(s) x "
                       f"{layout.chips_per_container} chips per host: {layout.processes} JAX "
                       f"processes ({option}){chosen}")
    selector = ", ".join(f"{k}={v}" for k, v in p.node_selector.items())
    out.append(f"  node selector   {selector}")
    out.append(f"  resources       google.com/tpu: {p.chips_per_container} per container")
    return out + _mesh_and_memory(r)


def _memory_lines(r: SliceResult) -> list[str]:
    e, m = r.memory, r.model
    assert e is not None and m is not None
    verdict = "fits" if e.fits else "DOES NOT FIT"
    usable = e.usable_bytes or 0
    out = [f"  model           {m.label}: {params(m.shape.total_params)} params, global batch "
           f"{r.to_dict()['memory']['globalBatch']}, seq {m.seq_len}, remat {e.remat}",
           f"  memory/device   {e.per_device_bytes / GIB:.2f} GiB of {usable / GIB:.2f} GiB "
           f"usable: {verdict}"]
    parts = sorted(e.breakdown.items(), key=lambda kv: -kv[1])
    out.append("  breakdown       " + ", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in parts))
    if r.batch_error:
        out.append(f"  batch           INVALID: {r.batch_error}")
    out += [f"  note            {n}" for n in e.notes if "batch shards" not in n or
            not r.batch_error]
    if not e.fits:
        out.append("  to fit          " + fit_hints(e.remat))
    return out


def fit_hints(remat: str) -> str:
    """What could make a model fit, leaving out what the plan already does."""
    hints = ["more fsdp/tensor sharding", "a larger slice"]
    if remat != "full":
        hints.append("remat full")
    hints += ["a smaller batch", "gradient accumulation"]
    return ", ".join(hints[:-1]) + ", or " + hints[-1]
