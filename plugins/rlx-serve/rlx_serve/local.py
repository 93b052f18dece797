"""A Ray cluster and Serve on this machine that stay on the loopback address.

``ray.init(_node_ip_address="127.0.0.1")`` alone is not enough: Ray replaces a loopback
node address with the host's routable one, and its agents then listen there. With
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (the setting Ray uses for single-machine clusters
on macOS and Windows) Ray keeps ``127.0.0.1`` as the node address, and every server it
starts -- GCS, raylet, object manager, agents, workers -- listens on loopback only. The
variable is read when ``ray`` is first imported, so :func:`start_local` sets it before
importing Ray and refuses to start when Ray was imported without it. Usage statistics are
switched off too (``RAY_USAGE_STATS_ENABLED=0``): nothing leaves the machine.

One server escapes that: Serve (2.5x) starts an inter-deployment gRPC server in every
replica on ``[::]:0`` -- all interfaces -- whatever the node address, with no setting for
it (it carries requests only under ``RAY_SERVE_USE_GRPC_BY_DEFAULT=1``). On a loopback node
:func:`keep_replica_server_on_loopback`, called by the replicas' constructors (Serve starts
that server after them), makes it listen on ``127.0.0.1`` too.
"""
from __future__ import annotations

import os
import sys

from .errors import ServeConfigError

__all__ = ["LOOPBACK", "LOOPBACK_ENV", "start_local", "stop_local", "keep_replica_server_on_loopback"]

LOOPBACK = "127.0.0.1"
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def start_local(*, port: int = 8000, num_cpus: int | None = None, num_gpus: int | None = None,
                object_store_memory: int | None = 512 << 20, **init_kwargs) -> None:
    """Start Ray on this machine (or check the running one) and Serve's HTTP proxy on
    ``127.0.0.1:port``. ``init_kwargs`` go to ``ray.init`` (e.g. ``_system_config``)."""
    if "ray" in sys.modules and _cluster_mode():
        raise ServeConfigError("ray was imported before rlx_serve.start_local, without "
                               "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: its node would listen on the host's address. "
                               "Call start_local before importing ray, or set the variable in the environment")
    os.environ.update(LOOPBACK_ENV)
    import ray
    from ray import serve
    if not ray.is_initialized():
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, object_store_memory=object_store_memory,
                 _node_ip_address=LOOPBACK, include_dashboard=False, dashboard_host=LOOPBACK, **init_kwargs)
    node = ray.util.get_node_ip_address()
    if node != LOOPBACK:
        raise ServeConfigError(f"the running Ray node listens on {node}, not {LOOPBACK}: stop it (ray.shutdown()) "
                               f"and call start_local first")
    serve.start(http_options={"host": LOOPBACK, "port": port})


def stop_local() -> None:
    """Shut Serve and the Ray cluster :func:`start_local` started down."""
    import ray
    from ray import serve
    if ray.is_initialized():
        serve.shutdown()
        ray.shutdown()


def keep_replica_server_on_loopback() -> None:
    """In a Serve replica on a loopback node: bind Serve's inter-deployment gRPC server to
    127.0.0.1 instead of every interface (see the module). Elsewhere, or where this Serve
    has no such server, nothing changes."""
    import ray
    if ray.util.get_node_ip_address() != LOOPBACK:
        return
    try:
        from ray.serve._private import replica  # the server's address is fixed there, privately
    except ImportError:
        return
    add_port = getattr(replica, "add_port_to_grpc_server", None)
    if add_port is None or getattr(add_port, "keeps_loopback", False):
        return

    def add_port_on_loopback(server, address: str):
        host, _, port = address.rpartition(":")
        return add_port(server, f"{LOOPBACK}:{port}" if host in ("[::]", "0.0.0.0", "") else address)
    add_port_on_loopback.keeps_loopback = True
    replica.add_port_to_grpc_server = add_port_on_loopback


def _cluster_mode() -> bool:
    """Whether the imported Ray replaces loopback node addresses (read at its import)."""
    from ray._private import ray_constants  # the flag has no public accessor
    return bool(ray_constants.ENABLE_RAY_CLUSTER)
