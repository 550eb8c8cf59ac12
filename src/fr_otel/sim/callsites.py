"""Python stacks for every place the simulated training script calls into c10d.

Torch captures the stack when it records an entry, innermost frame first. The c10d frames
below carry the function names and line numbers of the installed torch 2.13
``distributed_c10d.py``/``c10d_logger.py`` so the stacks look like what a real job dumps;
the user frames come from an invented but consistent training script. Every frame dict is
built once per simulation and shared by all entries that use it: torch's pickler memoizes
shared frames, which is what keeps real dumps small, and sharing keeps ours small too.
"""

from __future__ import annotations

from typing import Any

Frame = dict[str, Any]

_SITE = "/usr/local/lib/python3.11/site-packages/torch"
C10D = f"{_SITE}/distributed/distributed_c10d.py"
LOGGER = f"{_SITE}/distributed/c10d_logger.py"
AUTOGRAD = f"{_SITE}/autograd/function.py"
CONTEXTLIB = "/usr/local/lib/python3.11/contextlib.py"

TRAIN = "/workspace/train.py"
PIPE = "/workspace/model/pipeline.py"
ATTN = "/workspace/model/attention.py"
MLP = "/workspace/model/mlp.py"
MOE = "/workspace/model/moe.py"
BLOCK = "/workspace/model/transformer.py"
TPL = "/workspace/model/tensor_parallel.py"
GRADS = "/workspace/optim/grad_sync.py"
CLIP = "/workspace/optim/clip.py"
EMBED = "/workspace/model/embedding.py"
LOSS = "/workspace/model/loss.py"

# Innermost c10d frames per API; `wrapper` is the @_exception_logger decorator.
_API: dict[str, tuple[tuple[str, str, int], ...]] = {
    "all_reduce": (("all_reduce", C10D, 3245), ("wrapper", LOGGER, 83)),
    "broadcast": (("broadcast", C10D, 3145), ("wrapper", LOGGER, 83)),
    "_all_gather_base": (("all_gather_single", C10D, 4387), ("wrapper", LOGGER, 83)),
    "_reduce_scatter_base": (("reduce_scatter_single", C10D, 4936), ("wrapper", LOGGER, 83)),
    "all_to_all": (("all_to_all_single", C10D, 5131), ("wrapper", LOGGER, 83)),
    "send": (("isend", C10D, 2652),),
    "recv": (("irecv", C10D, 2709),),
    "batch_send": (("isend", C10D, 2652), ("batch_isend_irecv", C10D, 3053)),
    "batch_recv": (("irecv", C10D, 2709), ("batch_isend_irecv", C10D, 3053)),
    # endCoalescing runs when the `with _coalescing_manager(...)` block exits.
    "coalesced": (
        ("_coalescing_manager", C10D, 2928),
        ("__exit__", CONTEXTLIB, 144),
        ("batch_isend_irecv", C10D, 3051),
    ),
}

_MAIN_TAIL = (("train_step", TRAIN, 141), ("<module>", TRAIN, 210))
_FWD = (("forward_step", PIPE, 77),)
_BWD = (("backward_step", PIPE, 121),)
# Backward collectives are issued by autograd's worker thread: no training-loop frames.
_AUTOGRAD = (("apply", AUTOGRAD, 325),)

# Call site -> user frames, innermost first. Names say where in the step they are.
_USER: dict[str, tuple[tuple[str, str, int], ...]] = {
    "fwd.embed": (("forward", EMBED, 49), ("forward_step", PIPE, 74), *_MAIN_TAIL),
    "fwd.xent_max": (("forward", LOSS, 38), ("loss_func", PIPE, 91), *_MAIN_TAIL),
    "fwd.xent_sum": (("forward", LOSS, 47), ("loss_func", PIPE, 91), *_MAIN_TAIL),
    "fwd.xent_target": (("forward", LOSS, 55), ("loss_func", PIPE, 91), *_MAIN_TAIL),
    "bwd.embed": (("backward", TPL, 93), *_AUTOGRAD),
    "fwd.sp_gather": (("gather_sequence", TPL, 57), ("forward", BLOCK, 96), *_FWD, *_MAIN_TAIL),
    "fwd.attn_ar": (("forward", ATTN, 88), ("forward", BLOCK, 101), *_FWD, *_MAIN_TAIL),
    "fwd.moe_dispatch": (("dispatch", MOE, 104), ("forward", MOE, 152), *_FWD, *_MAIN_TAIL),
    "fwd.moe_combine": (("combine", MOE, 131), ("forward", MOE, 158), *_FWD, *_MAIN_TAIL),
    "fwd.mlp_ar": (("forward", MLP, 61), ("forward", BLOCK, 104), *_FWD, *_MAIN_TAIL),
    "fwd.p2p": (("exchange", PIPE, 44), ("forward_step", PIPE, 83), *_MAIN_TAIL),
    "bwd.recv": (("recv_backward", PIPE, 52), *_BWD, *_MAIN_TAIL),
    "bwd.send": (("send_backward", PIPE, 58), ("backward_step", PIPE, 129), *_MAIN_TAIL),
    "bwd.mlp_ar": (("backward", TPL, 71), *_AUTOGRAD),
    "bwd.moe_combine": (("backward", MOE, 41), *_AUTOGRAD),
    "bwd.moe_dispatch": (("backward", MOE, 36), *_AUTOGRAD),
    "bwd.attn_ar": (("backward", TPL, 79), *_AUTOGRAD),
    "bwd.sp_scatter": (("backward", TPL, 86), *_AUTOGRAD),
    "tail.rs_grads": (("reduce_scatter_grads", GRADS, 33), ("train_step", TRAIN, 147)),
    "tail.grad_norm": (("clip_grad_norm", CLIP, 27), ("train_step", TRAIN, 150)),
    "tail.ag_params": (("all_gather_params", GRADS, 61), ("train_step", TRAIN, 153)),
    "tail.metrics": (("reduce_metrics", TRAIN, 96), ("train_step", TRAIN, 160)),
}
for _site in ("tail.rs_grads", "tail.grad_norm", "tail.ag_params", "tail.metrics"):
    _USER[_site] = (*_USER[_site], ("<module>", TRAIN, 210))

AUTOGRAD_SITES = frozenset(s for s, fr in _USER.items() if fr[-1][0] == "apply")
"""Sites whose ops are recorded from autograd's thread rather than the main thread."""


class Stacks:
    """The frames of one simulation, each dict built once and shared by every entry.

    One table per simulation rather than per process: a caller who edits a frame in one
    fleet's dump must not change the stacks of every fleet simulated after it.
    """

    def __init__(self) -> None:
        self._frames: dict[tuple[str, str, int], Frame] = {}
        self._stacks: dict[tuple[str, str], tuple[Frame, ...]] = {}

    def frame(self, name: str, filename: str, line: int) -> Frame:
        key = (name, filename, line)
        f = self._frames.get(key)
        if f is None:
            f = {"name": name, "filename": filename, "line": line}
            self._frames[key] = f
        return f

    def stack(self, site: str, api: str) -> tuple[Frame, ...]:
        """The frames for ``api`` called from ``site``, innermost first."""
        key = (site, api)
        s = self._stacks.get(key)
        if s is None:
            s = tuple(self.frame(*f) for f in (*_API[api], *_USER[site]))
            self._stacks[key] = s
        return s
