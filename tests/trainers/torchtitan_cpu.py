"""Run torchtitan 0.3.0's trainer on CPU ranks over gloo, without editing torchtitan.

Use in place of `python -m torchtitan.train`, with the same arguments, e.g.

    torchrun --standalone --nproc-per-node 2 titan_cpu.py \
        --module llama3 --config llama3_debugmodel \
        --parallelism.spmd_backend partial_dtensor --training.disable_cuda_graphs ...

Written against torchtitan 0.3.0 + torch 2.13.0 (CPU ranks). torchtitan 0.3.0
pins a torch *nightly*; with torch 2.13.0 its default spmd_backend "spmd_types"
fails in fully_shard ("When dp_mesh_dims is provided, all parameters must be
DTensors ..."), hence --parallelism.spmd_backend partial_dtensor (plain FSDP2 over
the "fsdp" mesh), and torch.distributed.set_timeout (used by set_pg_timeouts)
does not exist in 2.13.0 (patch 5).

What assumes an accelerator, and the replacement, each decided before torchtitan's
trainer runs (several are read at import time, so the order below matters):

1. torchtitan.tools.utils computes `device_type = _get_available_device_type() or "cuda"`
   at import, and other modules copy the name (`from torchtitan.tools.utils import
   device_type`). Without a GPU that is "cuda". torch._utils._get_available_device_type
   is made to return "cpu" before that import: device_type="cpu",
   device_module=torch.cpu, init_device_mesh("cpu", ...), and init_distributed picks
   Backend.default_device_backend_map["cpu"] == "gloo".

2. Language models may only use FlexAttention (get_attention_config accepts "flex",
   "flex_flash" and the CUDA-only "varlen"), and torch's flex_attention raises
   "FlexAttention does not support backward on CPU" whenever q/k/v require grad,
   compiled or not. FlexAttention._compiled_flex_attn (the class-level compiled
   flex_attention every layer calls) becomes a dense reference with the same
   contract: the BlockMask's mask_mod materialised by create_mask, masked
   softmax(q k^T * scale) v, and the log-sum-exp when asked for. The module-level
   _compiled_create_block_mask becomes the eager create_block_mask (no inductor C++
   build on each rank).

3. MetricsProcessor's DeviceMemoryMonitor calls torch.cpu.get_device_name /
   get_device_properties / memory_stats / reset_peak_memory_stats / empty_cache,
   none of which exist. components.metrics.build_device_memory_monitor is replaced
   by a monitor with the same interface over the process's peak RSS, so each
   step's "memory:" column is the rank's real memory.

4. torchtitan scales gradients itself (by the global token count) and calls
   distributed.fsdp.disable_fsdp_gradient_division, which sets each FSDP module's
   gradient_divide_factor to 1.0; FSDP2 then reduce-scatters with
   ReduceOp.PREMUL_SUM(1.0), which gloo refuses ("Cannot use ReduceOp.PREMUL_SUM
   with Gloo"). The replacement also sets set_force_sum_reduction_for_comms(True):
   SUM, then a division by 1.0, the same gradients.

5. After the first step, distributed.utils.set_pg_timeouts lowers every group's
   timeout to --comm.train_timeout_seconds. It calls
   barrier(device_ids=[torch.cpu.current_device()]) (the string "cpu", which
   BarrierOptions refuses) and torch.distributed.set_timeout (absent in torch
   2.13.0). The replacement: barrier(), then distributed_c10d._set_pg_timeout on
   every one-dimensional mesh group and the default group.

Fault injection for tests (not a CPU fix): TITAN_STALL_RANK=R [TITAN_STALL_STEP=S,
default 5] [TITAN_STALL_SECONDS=T, default 3600] makes rank R sleep in host code
before step S's train_step while the other ranks go on into that step's
collectives: a rank stuck outside any collective, as a hung dataloader would leave it.
"""

from __future__ import annotations

import datetime
import os
import resource
import time

import torch
import torch._utils

torch._utils._get_available_device_type = lambda: "cpu"  # 1

import torchtitan.tools.utils as titan_utils  # noqa: E402  (must follow patch 1)

assert titan_utils.device_type == "cpu", titan_utils.device_type

import torchtitan.components.metrics as titan_metrics  # noqa: E402
import torchtitan.distributed.fsdp as titan_fsdp  # noqa: E402
import torchtitan.distributed.utils as titan_dist_utils  # noqa: E402
import torchtitan.models.common.attention as titan_attention  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
from torch.nn.attention.flex_attention import (  # noqa: E402
    AuxOutput,
    create_block_mask,
    create_mask,
)
from torchtitan.tools.logging import logger  # noqa: E402
from torchtitan.trainer import Trainer  # noqa: E402


# 2
def dense_flex_attention(
    q,
    k,
    v,
    *,
    score_mod=None,
    block_mask=None,
    scale=None,
    enable_gqa=False,
    return_aux=None,
    kernel_options=None,
):
    """flex_attention's math on (B, N, L, H) tensors, differentiable on CPU."""
    if score_mod is not None:
        raise NotImplementedError("dense_flex_attention: score_mod is not supported")
    if enable_gqa and k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)).float() * scale
    if block_mask is not None:
        mask = create_mask(
            block_mask.mask_mod,
            block_mask.shape[0],
            None,
            q.shape[-2],
            k.shape[-2],
            device=q.device,
        )
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.exp(scores - lse.unsqueeze(-1)).to(v.dtype) @ v
    want_lse = return_aux is not None and return_aux.lse
    return out, AuxOutput(lse=lse if want_lse else None)


titan_attention.FlexAttention._compiled_flex_attn = staticmethod(dense_flex_attention)
titan_attention._compiled_create_block_mask = create_block_mask


# 3
class CpuMemoryMonitor:
    """DeviceMemoryMonitor's interface over the process's peak RSS."""

    def __init__(self) -> None:
        self.device_name = "cpu"
        self.device_capacity = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        self.device_capacity_gib = self.device_capacity / 2**30

    def get_peak_stats(self) -> titan_metrics.DeviceMemStats:
        # ru_maxrss is KiB on Linux and a peak since the process began: it cannot
        # be reset, so reset_peak_stats is a no-op.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        pct = 100 * peak / self.device_capacity
        return titan_metrics.DeviceMemStats(peak / 2**30, pct, peak / 2**30, pct, 0, 0)

    def reset_peak_stats(self) -> None:
        pass


titan_metrics.build_device_memory_monitor = CpuMemoryMonitor


# 4
_disable_fsdp_gradient_division = titan_fsdp.disable_fsdp_gradient_division


def disable_fsdp_gradient_division_gloo(model: torch.nn.Module) -> None:
    _disable_fsdp_gradient_division(model)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)


titan_fsdp.disable_fsdp_gradient_division = disable_fsdp_gradient_division_gloo


# 5
def set_pg_timeouts_cpu(timeout: datetime.timedelta, parallel_dims) -> None:
    logger.info(f"Synchronizing and adjusting timeout for all ProcessGroups to {timeout}")
    torch.distributed.barrier()
    groups = [
        mesh.get_group() for mesh in parallel_dims.get_all_one_dimensional_meshes().values()
    ] + [None]
    for group in groups:
        torch.distributed.distributed_c10d._set_pg_timeout(timeout, group)


titan_dist_utils.set_pg_timeouts = set_pg_timeouts_cpu


# fault injection
if "TITAN_STALL_RANK" in os.environ:
    _train_step = Trainer.train_step
    _stall_rank = int(os.environ["TITAN_STALL_RANK"])
    _stall_step = int(os.environ.get("TITAN_STALL_STEP", "5"))
    _stall_seconds = float(os.environ.get("TITAN_STALL_SECONDS", "3600"))

    def train_step_with_stall(self, *args, **kwargs):
        if self.step == _stall_step and torch.distributed.get_rank() == _stall_rank:
            logger.warning(
                f"TITAN_STALL_RANK: rank {_stall_rank} stalls {_stall_seconds}s "
                f"before step {_stall_step}"
            )
            time.sleep(_stall_seconds)
        return _train_step(self, *args, **kwargs)

    Trainer.train_step = train_step_with_stall


from torchtitan.train import main  # noqa: E402

if __name__ == "__main__":
    main()
