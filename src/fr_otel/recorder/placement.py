"""Where a rank runs: its host, its index on the host and the accelerator it drives.

A fleet's questions (which node keeps failing) are about machines, not rank numbers, which
mean nothing from one job to the next: every rank's rows carry these (``schema.HOST_COLUMNS``)
and its spans the host as ``host.name``.
"""

from __future__ import annotations

from fr_otel import config
from fr_otel.archive.hosts import Placement

__all__ = ["Placement", "cuda_device", "this_rank"]


def this_rank(backend: str | None) -> Placement:
    """This process's placement; the device only for NCCL (a gloo rank drives no GPU)."""
    return Placement(
        host=config.host_name(),
        local_rank=config.local_rank(),
        device=cuda_device() if backend is not None and "nccl" in backend else None,
    )


def cuda_device() -> str | None:
    """The current CUDA device's UUID, else its PCI bus id; None without one, or before the
    process has used CUDA: until a rank picks its device (``torch.cuda.set_device``) every
    rank's current device is 0, and asking would set CUDA up in a process that may not
    want it yet. Never raises: a recorder that cannot tell the device still records."""
    try:
        import torch

        if not torch.cuda.is_available() or not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            return None
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
    except Exception:
        return None
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        return text if text.startswith("GPU-") else f"GPU-{text}"
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    domain = getattr(props, "pci_domain_id", 0) or 0
    slot = getattr(props, "pci_device_id", 0) or 0
    return f"{int(domain):08x}:{int(bus):02x}:{int(slot):02x}.0"
