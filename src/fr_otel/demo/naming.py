"""Where each rank's dump goes, under the file-naming conventions real jobs use.

The names mirror what torch and its users write, so that the dump discovery code is
exercised on every layout found in the wild:

* ``torch_default``: ``comm_lib_trace_rank_<N>``, torch 2.13's default
  ``TORCH_FR_DUMP_TEMP_FILE`` prefix plus the global rank.
* ``nccl``: ``nccl_trace_rank_<N>``, the older default still quoted by the tutorial.
* ``torchtitan``: ``comm_traces/rank_<N>`` (``save_traces_folder`` / ``save_traces_file_prefix``).
* ``torchft``: ``comm_lib_trace_quorum_<id>/<N>``, one folder per quorum with the bare rank as
  the file name (torchft rewrites the dynamic file name after each reconfigure).

JSON dumps take the same name plus ``.json``.
"""

from __future__ import annotations

#: Every supported ``naming=`` value.
NAMINGS = ("torch_default", "nccl", "torchtitan", "torchft")

#: The quorum id used for the ``torchft`` layout; any id works, one fixed id keeps fixtures stable.
TORCHFT_QUORUM_ID = 3


def dump_relpath(naming: str, rank: int, *, json: bool = False) -> str:
    """The dump's path relative to the output folder, with ``/`` separators.

    Raises ``ValueError`` for an unknown ``naming``.
    """
    if naming == "torch_default":
        name = f"comm_lib_trace_rank_{rank}"
    elif naming == "nccl":
        name = f"nccl_trace_rank_{rank}"
    elif naming == "torchtitan":
        name = f"comm_traces/rank_{rank}"
    elif naming == "torchft":
        name = f"comm_lib_trace_quorum_{TORCHFT_QUORUM_ID}/{rank}"
    else:
        raise ValueError(f"naming must be one of {NAMINGS}, not {naming!r}")
    return name + ".json" if json else name
