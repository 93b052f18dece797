"""``deployment()``: an RLX graph or ONNX model as a Ray Serve application.

The application is two deployments: ``<name>-model``, ``replicas`` copies of
:class:`~rlx_serve.replica.ModelReplica` (each a ``DeviceRouter`` on the devices Ray gave
it), behind ``<name>``, one :class:`~rlx_serve.ingress.Ingress` taking HTTP and handle
calls and re-sending requests whose replica died.

Resources per replica come from the policy: the first device it allows (in its own
order) says what a replica is for. ``cuda`` and ``rocm`` -- the GPUs Ray schedules, making
each replica's GPU the only one it sees -- ask ``num_gpus=1`` (``gpus_per_replica=0.5``:
two replicas share a GPU); every replica asks ``num_cpus=1`` (``cpus_per_replica``). A
policy allowing every device (the default, unless ``RLX_DEVICES`` says otherwise) asks
for CPUs only.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from rlx_core.select import DevicePolicy

from .errors import ServeConfigError
from .ingress import Ingress, IngressOptions
from .model import Batching, load_model
from .replica import ModelReplica

__all__ = ["deployment", "replica_resources", "GPU_DEVICES"]

GPU_DEVICES = ("cuda", "rocm")  # what Ray's num_gpus hands out (CUDA_ / ROCR_VISIBLE_DEVICES)


def replica_resources(policy: DevicePolicy, cpus: float | None = None, gpus: float | None = None) -> dict[str, float]:
    """``{"num_cpus": ..., "num_gpus": ...}`` of one replica under ``policy`` (see the module)."""
    first = policy.order(policy.allow)[0] if policy.allow else None
    num_gpus = gpus if gpus is not None else (1 if first is not None and first.label in GPU_DEVICES else 0)
    num_cpus = cpus if cpus is not None else 1
    for name, value in (("cpus_per_replica", num_cpus), ("gpus_per_replica", num_gpus)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ServeConfigError(f"{name} must be a number >= 0, got {value!r}")
    if num_gpus > 1 and num_gpus != int(num_gpus):
        raise ServeConfigError(f"gpus_per_replica above 1 must be whole GPUs, got {num_gpus}")
    return {"num_cpus": num_cpus, "num_gpus": num_gpus}


def deployment(model: Any, *, weights: "Mapping[str, Any] | str | os.PathLike | None" = None,
               policy: DevicePolicy | None = None, replicas: int = 1, batching: "Batching | bool | None" = None,
               input_shapes: Mapping[str, Any] | None = None, cpus_per_replica: float | None = None,
               gpus_per_replica: float | None = None, actor_options: Mapping[str, Any] | None = None,
               max_ongoing_requests: int | None = None, health_check_period_s: float = 10.0,
               health_check_timeout_s: float = 30.0, options: IngressOptions | None = None,
               access_log: bool = True, name: str = "rlx"):
    """A Ray Serve application serving ``model`` (a Graph, an ``.onnx`` or a graph ``.json``
    path): ``serve.run(deployment("model.onnx", replicas=2), route_prefix="/")``.

    ``weights``: param values (mapping or ``.npz`` path). ``policy``: the devices replicas may
    use (default: ``DevicePolicy.from_env()`` here, in the caller). ``batching``: see
    :func:`rlx_serve.model.load_model`. ``actor_options`` are merged into the model
    replicas' ``ray_actor_options`` (``runtime_env`` ...); ``max_ongoing_requests`` per
    replica defaults to twice the batch (at least 8). ``options``: the ingress's retries,
    time limit and body limit. ``access_log``: Serve's log line per request. Everything is
    checked now: a bad model, weights or setting raises here, not in the replicas."""
    from ray import serve
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ServeConfigError(f"replicas must be an integer >= 1, got {replicas!r}")
    spec = load_model(model, weights=weights, input_shapes=input_shapes, batching=batching)
    policy = policy if policy is not None else DevicePolicy.from_env()
    if not isinstance(policy, DevicePolicy):
        raise ServeConfigError(f"policy must be a DevicePolicy, got {type(policy).__name__}")
    batch = spec.batching.max_batch_size if spec.batching is not None else 0
    ongoing = max_ongoing_requests if max_ongoing_requests is not None else max(2 * batch, 8)
    actor = {**replica_resources(policy, cpus_per_replica, gpus_per_replica), **dict(actor_options or {})}
    model_deployment = serve.deployment(ModelReplica, name=f"{name}-model", num_replicas=replicas,
                                        ray_actor_options=actor, max_ongoing_requests=ongoing,
                                        health_check_period_s=health_check_period_s,
                                        health_check_timeout_s=health_check_timeout_s,
                                        logging_config={"enable_access_log": access_log})
    ingress = serve.deployment(Ingress, name=name, num_replicas=1, ray_actor_options={"num_cpus": 0},
                               max_ongoing_requests=1024, logging_config={"enable_access_log": access_log})
    return ingress.bind(model_deployment.bind(spec, policy), spec.signature, options or IngressOptions())
