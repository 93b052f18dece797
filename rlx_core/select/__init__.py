"""Multi-device selection: which devices a process may use (``DevicePolicy``), which can
run a graph and which is fastest (cost model + calibration), and runners that pick,
fall back and serve across devices (``GraphDevices``, ``FlexibleSession``, ``DeviceRouter``).

    from rlx_core.select import DevicePolicy, GraphDevices, fastest_device_for
    device = fastest_device_for(g)
    runner = GraphDevices(g, DevicePolicy.only(["cpu", "cuda"]).with_prefer(["cuda"]))
    runner.set_param("w", w)
    device, out = runner.run_chain({"x": x})
"""
from ..runtime.device import device_label, parse_device
from .calibration import (NOMINAL, Calibration, cache_dir, calibrate, calibration_path, device_figures,
                          load_calibration, measure_backend, measure_overheads, progress_reporter, report_progress)
from .cost import DeviceFigures, GraphCost, NodeCost, estimate_ns, graph_cost, node_flops
from .devices import (TIE_TOLERANCE, Blocker, DeviceCandidate, DevicePick, advisory_capabilities, available_devices,
                      blocker_for, device_report, devices_for, estimate_device_ns, fastest_device_for, is_available,
                      is_software, pick_device, rank_devices, resolve_device, software_detail)
from .manifest import BackendsManifest, BackendInfo, PluginInfo, backends_manifest
from .policy import DevicePolicy, device_chain_from_env, device_from_env, parse_device_list
from .router import DeviceRouter, FlexibleSession
from .runner import DeviceBenchResult, GraphDevices, RunRecord, benchmark_devices

__all__ = ["DevicePolicy", "parse_device_list", "device_from_env", "device_chain_from_env", "GraphDevices",
           "FlexibleSession", "DeviceRouter", "DeviceBenchResult", "RunRecord", "benchmark_devices",
           "DeviceCandidate", "Blocker", "device_report", "advisory_capabilities", "available_devices", "is_available", "devices_for",
           "blocker_for", "fastest_device_for", "resolve_device", "rank_devices", "estimate_device_ns",
           "DevicePick", "pick_device", "is_software", "software_detail",
           "TIE_TOLERANCE", "BackendsManifest", "PluginInfo", "BackendInfo", "backends_manifest", "device_label",
           "parse_device", "Calibration", "NOMINAL", "cache_dir", "calibration_path", "calibrate",
           "load_calibration", "device_figures", "measure_backend", "measure_overheads", "report_progress",
           "progress_reporter", "DeviceFigures", "GraphCost", "NodeCost", "graph_cost", "estimate_ns", "node_flops"]
