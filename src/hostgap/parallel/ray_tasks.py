"""Ray (an optional extra: ``pip install 'hostgap[ray]'``; docs/ray.md): joining a cluster, and
a function mapped over items as Ray tasks."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from hostgap.errors import HostgapError

LOCAL_OBJECT_STORE_BYTES = 256 << 20
"""Object store of a local cluster started here: results are small JSON-like documents."""


def connect(address: str | None = None) -> Any:
    """The ``ray`` module, initialised: joined to the cluster at ``address``, or a local one
    started here (no dashboard) when none is given. One-line errors when Ray is missing or the
    cluster cannot be reached."""
    try:
        import ray
    except ImportError:
        raise HostgapError(
            "--backend ray", "Ray is not installed; install it with: pip install 'hostgap[ray]'"
        ) from None
    if ray.is_initialized():
        return ray
    import logging  # here, not at import: a single-trace analysis never loads it

    kw: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": False}
    # ray.init sets a SIGTERM handler of its own in the calling process (sys.exit) and leaves it
    # there: the caller's is put back, so this process (and every process it forks) keeps it
    main = threading.current_thread() is threading.main_thread()
    old = signal.getsignal(signal.SIGTERM) if main else None
    try:
        if address:
            ray.init(address=address, **kw)
        else:
            ray.init(include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE_BYTES, **kw)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise HostgapError(address or "ray", f"cannot start or join a Ray cluster ({str(e).splitlines()[0]})") from None
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    return ray


def map_tasks(
    fn: Callable[..., Any],
    items: Sequence[Any],
    *extra: Any,
    address: str | None = None,
    num_cpus: int = 1,
    max_retries: int = 2,
) -> list[Any]:
    """``[fn(item, *extra) for item in items]`` as Ray tasks of ``num_cpus`` CPUs each (a task
    whose worker dies is run again, up to ``max_retries`` times), results in item order."""
    ray = connect(address)
    task = ray.remote(num_cpus=num_cpus, max_retries=max_retries)(fn)
    return ray.get([task.remote(item, *extra) for item in items])
