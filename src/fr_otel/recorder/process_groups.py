"""Torch's process groups as the recorder describes them: every group of this process
(torch's registry) and each one's members, backend, own timeout and, for a group of
several backends, the backend of each device. The hooks describe a group at its first
collective, the mirror of torch's FR each group its entries name.
"""

from __future__ import annotations

from typing import Any

from fr_otel.recorder.frmerge import QUEUED_BACKENDS
from fr_otel.recorder.ring import GroupInfo

_DEVICE_OF_BACKEND = {"nccl": "cuda", "xccl": "xpu"}
"""Where a backend's ops run, for groups that name one backend (``init_process_group("nccl")``)."""


def _backends_by_device(config: str, fallback: str) -> dict[str | None, str]:
    """``"cpu:gloo,cuda:nccl"`` -> ``{"cpu": "gloo", "cuda": "nccl", None: fallback}``."""
    found: dict[str | None, str] = {}
    for part in config.split(","):
        device, sep, name = part.strip().partition(":")
        if sep and name:
            found[device] = name
    found[None] = fallback
    return found


def describe_backends(pg: Any) -> tuple[GroupInfo, int, dict[str | None, str]]:
    """A process group's description, its own timeout (ns) and, for a group of several
    backends, the backend of each device (empty for one backend)."""
    from torch.distributed import distributed_c10d as c10d

    # init_process_group() without a backend gives "undefined" here and one backend per
    # device in the config ("cpu:gloo,cuda:nccl"): each op's tensors pick theirs
    backend = str(c10d.get_backend(pg))
    try:
        by_device = _backends_by_device(str(c10d.get_backend_config(pg)), backend)
    except Exception:
        by_device = {None: backend}
    main = next((b for b in by_device.values() if b in QUEUED_BACKENDS), backend)
    if backend == "undefined" or ":" in backend:
        backend = main
    by_device[None] = backend
    if len(set(by_device.values()) - {backend}) == 0:
        by_device = {}  # one backend for every device: no need to look at tensors
    ranks = tuple(c10d.get_process_group_ranks(pg))
    try:
        import torch

        device = torch.device(_DEVICE_OF_BACKEND.get(main, "cpu"))
        timeout_ns = int(pg._get_backend(device).options._timeout.total_seconds() * 1e9)
    except Exception:  # some backends expose no options
        default = c10d._get_default_timeout(c10d.Backend(main))
        timeout_ns = int(default.total_seconds() * 1e9)
    info = GroupInfo(
        name=c10d._get_process_group_name(pg),
        desc=getattr(pg, "group_desc", None),
        ranks=ranks,
        backend=backend,
        timeout_ms=timeout_ns // 1_000_000,
    )
    return info, timeout_ns, by_device


def describe_group(pg: Any) -> tuple[GroupInfo, int]:
    """A process group's description and its own timeout (ns)."""
    info, timeout_ns, _ = describe_backends(pg)
    return info, timeout_ns


def torch_groups() -> dict[str, Any]:
    """Group name -> process group, for every group of this process torch knows."""
    from torch.distributed import distributed_c10d as c10d

    try:
        return {name: pg for pg, name in list(c10d._world.pg_names.items())}
    except Exception:  # torch moved its registry: only the hooks' groups are described
        return {}
