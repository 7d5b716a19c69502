"""Ray as ragopt's clients use it (`ragopt sweep --executor ray`, `ragopt index --executor ray`;
pip install 'ragopt[ray]'): the check that it is installed, and a session on a local instance or a cluster.

An address that does not answer is refused in seconds, naming the flag or key that gave it: `ray.init` itself
waits on a dead HOST:PORT for minutes and on a dead ray://HOST:PORT for 30 s (measured with ray 2.60)."""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ragopt.errors import InputError

INSTALL = "pip install 'ragopt[ray]'"
PROBE_S = 5.0  # how long an address may take to accept a connection before it is called dead


def require_ray(field: str = "executor", path: str | None = None) -> None:
    """Before any work: the Ray executor needs ray installed."""
    if importlib.util.find_spec("ray") is None:
        raise InputError(f"the Ray executor needs ray: {INSTALL}", path=path, field=field)


def probe(address: str, field: str) -> None:
    """Refuse a cluster address that is not HOST:PORT, ray://HOST:PORT or auto, or whose port does not accept a
    connection within PROBE_S seconds."""
    if address == "auto":  # the cluster `ray start` runs on this machine: ray.init says at once when there is none
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"expected HOST:PORT, ray://HOST:PORT or auto, got {address!r}", field=field)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_S).close()
    except OSError as exc:
        raise InputError(f"no Ray cluster answers at {address} ({exc.strerror or exc})", field=field) from None


@contextmanager
def ray_session(address: str | None, num_cpus: int | None = None, field: str = "ray_address") -> Iterator[Any]:
    """A connected `ray` module: the session already open in this process (left open), else one started
    here and shut down on the way out: the cluster at `address` (e.g. ray://HEAD:10001, or "auto" for the
    one `ray start` runs on this machine), or without one, always a new local instance (never a cluster
    left behind in /tmp/ray by an earlier `ray start`, which plain `ray.init()` would join). A cluster that
    does not answer is an InputError naming `field`."""
    import ray

    if ray.is_initialized():
        yield ray
        return
    if address:
        probe(address, field)
        try:
            ray.init(address=address, log_to_driver=False)
        except ConnectionError as exc:
            raise InputError(f"no Ray cluster answers at {address}: {exc}", field=field) from None
    else:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
