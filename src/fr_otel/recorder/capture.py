"""Hooks on ``torch.distributed``'s collective and point-to-point functions.

Each public function (``all_reduce``, ``send``, ``batch_isend_irecv``'s ``isend`` ...) is
replaced, in ``torch.distributed`` and in ``torch.distributed.distributed_c10d`` (whose own
helpers call through the module globals), by a wrapper that writes one ring slot before
the call and marks it done after. That records what gloo's Flight Recorder loses: group
membership, completion, the Python call site and send/recv.

The wrapper's cost is what training pays, so it does only dictionary lookups for anything
seen before, and it never lets an error of its own reach the caller: a failure in the
recorder is logged once and counted, and the collective runs unrecorded. Where the C
extension ``_fasthook`` was built, collectives are wrapped by it: it records the calls
whose group, tensors and call site these dictionaries already hold, and hands every other
call to the Python code here (``FR_OTEL_PURE_PYTHON=1`` switches it off).

The wrapper stays out of the user's tracebacks: people blame the last library their
traceback names, and a collective that fails (a gloo timeout, a peer gone) raises through
whatever frames are on the stack while it runs. With ``_fasthook`` the original is always
called from C, which adds no frame, the Python code recording in two halves around it
(``_Recording``); in pure Python the one frame that must stay is named ``RECORDS_ONLY_NAME``.

The module is long because the wrapper is the hooks' measured hot path: its common case is
inlined on ``Capture``'s closure locals, with no Python call but the original's (inlining
more than halves its warm cost per call; ``benchmarks/recorder_overhead.py`` measures what
training pays), and the compiled hook's slow path, the recorded call's two halves and the
group and call-site caches it reads are that same state. What it does not read per call
lives elsewhere (``process_groups``).
"""

from __future__ import annotations

import contextlib
import dis
import functools
import inspect
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

from fr_otel.recorder.frmerge import QUEUED_BACKENDS
from fr_otel.recorder.mirror_rows import detection_timeout_ns
from fr_otel.recorder.process_groups import describe_backends
from fr_otel.recorder.ring import HEADER_SIZE, NEXT_RECORD_OFFSET, GroupInfo, Signature
from fr_otel.recorder.slot import (
    COMPLETED,
    DONE,
    DONE_OFFSET,
    FAILED,
    SCHEDULED,
    SLOT,
    SLOT_SIZE,
    STARTED,
    layout,
)
from fr_otel.stacks import is_library_frame

if TYPE_CHECKING:
    from fr_otel.recorder.recorder import Recorder
    from fr_otel.recorder.ring import RingWriter

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class HookState:
    """What one compiled hook (``_fasthook.FastHook``) reads, in one object: the ring core,
    the call it wraps and the Python wrapper it hands every other call to, and the caches
    and counters it shares with that wrapper (the same dicts and lists, not copies: the
    Python wrapper fills them, the compiled one reads them)."""

    core: Any
    """The ``_fasthook.Core`` that holds the ring's mapping."""
    original: Callable[..., Any]
    slow: Callable[..., Any]
    """Every call the C path does not record: a ``_fasthook.RecordedCall`` of the Python
    code (``Capture._recording``)."""
    recorder: Recorder
    groups: dict[Any, tuple[int, bool]]
    signatures: dict[Any, int]
    owner: list[Any]
    """The writer the signature indexes belong to (one item)."""
    recent: dict[tuple[int, int, int, int], tuple[int, Any, Any]]
    library: dict[int, bool]
    seqs: list[Callable[[], int]]
    """Per group, torch's collective counter (the hook adds one)."""
    p2p_seqs: list[int]
    op_counters: list[Callable[[], int] | None]
    """Per group, gloo's op counter where ``seqs`` derives the collective number from it:
    the hook then derives it itself (``_without_p2p``'s rule)."""
    hidden_ops: list[int]
    tensor_type: type
    settle_later: Callable[[Any, int, Any], None]
    failed: Callable[[tuple[int, bool | None], BaseException], None]
    failed_internally: Callable[[BaseException], None]
    inputs_name: str | None
    outputs_name: str | None
    group_at: int
    inputs_at: int
    outputs_at: int
    async_at: int
    same: bool


@dataclass(frozen=True)
class _Spec:
    op: str
    inputs: str | None
    """Parameter holding the input tensor(s)."""
    outputs: str | None
    kind: str = "collective"
    """``collective``, ``send`` or ``recv``."""
    blocking: bool = True
    """False for isend/irecv (always asynchronous)."""


SPECS: dict[str, _Spec] = {
    "broadcast": _Spec("broadcast", "tensor", "tensor"),
    "all_reduce": _Spec("all_reduce", "tensor", "tensor"),
    "all_reduce_coalesced": _Spec("all_reduce_coalesced", "tensors", "tensors"),
    "reduce": _Spec("reduce", "tensor", "tensor"),
    "all_gather": _Spec("all_gather", "tensor", "tensor_list"),
    "all_gather_single": _Spec("all_gather_into_tensor", "input_tensor", "output_tensor"),
    "all_gather_into_tensor": _Spec("all_gather_into_tensor", "input_tensor", "output_tensor"),
    "_all_gather_base": _Spec("_all_gather_base", "input_tensor", "output_tensor"),
    "all_gather_coalesced": _Spec(
        "all_gather_coalesced", "input_tensor_list", "output_tensor_lists"
    ),
    "gather": _Spec("gather", "tensor", "gather_list"),
    "scatter": _Spec("scatter", "scatter_list", "tensor"),
    "reduce_scatter": _Spec("reduce_scatter", "input_list", "output"),
    "reduce_scatter_single": _Spec("reduce_scatter_tensor", "input", "output"),
    "reduce_scatter_tensor": _Spec("reduce_scatter_tensor", "input", "output"),
    "_reduce_scatter_base": _Spec("_reduce_scatter_base", "input", "output"),
    "all_to_all_single": _Spec("all_to_all_single", "input", "output"),
    "all_to_all": _Spec("all_to_all", "input_tensor_list", "output_tensor_list"),
    "barrier": _Spec("barrier", None, None),
    # gloo runs it as sends and receives its Flight Recorder does not record (they take
    # two of the group's sequence numbers with 2 ranks): only this hook sees it
    "monitored_barrier": _Spec("monitored_barrier", None, None),
    "send": _Spec("send", "tensor", None, kind="send"),
    "recv": _Spec("recv", None, "tensor", kind="recv"),
    "isend": _Spec("send", "tensor", None, kind="send", blocking=False),
    "irecv": _Spec("recv", None, "tensor", kind="recv", blocking=False),
}
"""Function name -> how to read its arguments. A collective that only delegates to another
one here (``all_gather_into_tensor`` calls ``all_gather_single`` in torch 2.13) is left
unpatched: the inner call is recorded, and the call site skips torch's frames anyway."""

MAX_UNFINISHED = 4096
"""Async works polled at most: a program that never waits for its isends cannot grow it."""

RECORDS_ONLY_NAME = "fr_otel_only_records_this_call__not_the_cause"
"""What a traceback names a frame of the recorder that is on the stack while the collective
runs (the pure-Python wrappers; the compiled hook leaves none): the error is the
collective's, the frame only recorded the call."""

_P2P = frozenset({"send", "recv", "isend", "irecv"})
"""Blocking ``send`` calls ``isend`` and waits (torch 2.13): both are patched, and the inner
call is not recorded again (a thread-local flag, paid only by point-to-point calls)."""


def _delegates(function: Callable[..., Any]) -> bool:
    """Does ``function`` call another collective of ``SPECS`` through the module's globals?"""
    try:
        code = inspect.unwrap(function).__code__
    except (AttributeError, ValueError):
        return False
    own = getattr(function, "__name__", "")
    return any(
        i.opname == "LOAD_GLOBAL" and i.argval in SPECS and i.argval not in _P2P | {own}
        for i in dis.get_instructions(code)
    )


def _dtype_name(dtype: Any, cache: dict[Any, str] = {}) -> str:  # noqa: B006 - a cache
    name = cache.get(dtype)
    if name is None:
        import torch

        # c10's ScalarType names, as FR writes them: "Float", "BFloat16", "Long"
        name = torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")
        cache[dtype] = name
    return name


def _tensors(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        out: list[Any] = []
        for item in value:
            out.extend(_tensors(item))
        return out
    return [value] if hasattr(value, "shape") else []


def _device_type(value: Any) -> str | None:
    """The device type of the first tensor in ``value`` (a tensor or nested lists)."""
    if isinstance(value, list | tuple):
        for item in value:
            found = _device_type(item)
            if found is not None:
                return found
        return None
    device = getattr(value, "device", None)
    return getattr(device, "type", None)


def _shape_key(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return tuple(_shape_key(item) for item in value)
    shape = getattr(value, "shape", None)
    return (shape, value.dtype) if shape is not None else None


_Known = tuple[int, GroupInfo, int, dict[str | None, str], str]


class _OwnSequence:
    """Counts a group's recorded collectives, for a backend whose groups do not answer
    ``_get_sequence_number_for_group``. Called once per collective, before it."""

    def __init__(self) -> None:
        self.issued = 0

    def __call__(self) -> int:
        issued = self.issued
        self.issued = issued + 1
        return issued


def _sequence_of(pg: Any, fallback: Callable[[], int]) -> Callable[[], int]:
    """The group's own collective counter (on gloo a call costs a small part of the hook's
    own), if it has one."""
    counter = getattr(pg, "_get_sequence_number_for_group", None)
    try:
        if counter is not None and isinstance(counter(), int):
            return counter  # type: ignore[no-any-return]
    except Exception:  # a backend that does not implement it
        pass
    return fallback


def _without_p2p(
    counter: Callable[[], int], p2p: list[int], hidden: list[int], index: int
) -> Callable[[], int]:
    """Gloo's counter numbers every op, sends and receives included, but its Flight
    Recorder numbers collectives only (``collective_seq_id``; it records no send/recv):
    the collective number is the op number less the group's sends and receives, those
    the hooks recorded (``p2p``) and those ``monitored_barrier`` made inside (``hidden``).
    A send/recv issued past the hooks otherwise shifts it; the FR mirror's records then
    carry torch's own numbers."""

    def collective_seq() -> int:
        return counter() - p2p[index] - hidden[index]

    return collective_seq


MONITORED_BARRIER_SEQS = 2
"""Collective sequence numbers gloo's ``monitored_barrier`` takes on every rank (torch
2.13); its op numbers are 2 per peer on the group's rank 0 and 2 on the others."""


def _current_seq(counter: Callable[[], int]) -> int:
    """The collective sequence number a point-to-point op is issued at (it takes none)."""
    return counter.issued if isinstance(counter, _OwnSequence) else counter()


def _records_only(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, named ``RECORDS_ONLY_NAME`` where a traceback shows it. Its file stays
    ours: the call-site walk skips frames of this file, and so do readers of stacks."""
    code = function.__code__
    if sys.version_info >= (3, 11):
        code = code.replace(co_name=RECORDS_ONLY_NAME, co_qualname=RECORDS_ONLY_NAME)
    else:
        code = code.replace(co_name=RECORDS_ONLY_NAME)
    function.__code__ = code
    return function


def _dressed(wrapper: Any, original: Callable[..., Any]) -> Any:
    """``wrapper`` introducing itself as ``original`` (name, doc, ``__wrapped__``), from this
    module (how a caller tells the recorder's patch from torch's function)."""
    wrapper.__name__ = original.__name__
    wrapper.__qualname__ = original.__qualname__
    wrapper.__doc__ = original.__doc__
    wrapper.__module__ = __name__
    wrapper.__wrapped__ = original
    return wrapper


@dataclass(frozen=True, kw_only=True, slots=True)
class _Recording:
    """The recording of a call in two halves, for a caller that calls the original between
    them: ``_fasthook.RecordedCall``, from C, so that no frame of the recorder is on the
    stack while the original runs (nor in the traceback of what it raises)."""

    before: Callable[..., Any]
    """Takes the call's arguments and records it: the token the other two take, or None
    where there is nothing to finish (the original is just called)."""
    after: Callable[[Any, Any], None]
    """(token, result) once the original returned."""
    failed: Callable[[Any, BaseException], None]
    """(token, exception) once the original raised, whatever it raised (a guard must be
    let go however the call ends)."""


_UNRECORDED = object()
"""What an ``_around`` step's ``enter`` returns for a call that is not to be recorded."""


def _around(
    inner: _Recording,
    enter: Callable[[tuple[Any, ...], dict[str, Any]], Any],
    leave: Callable[[Any], None],
) -> _Recording:
    """``inner`` with a step of its own: ``enter(args, kwargs)`` before it, and
    ``leave(what enter returned)`` once the call ended, however it ended. ``enter``
    returning ``_UNRECORDED``: the call is neither recorded nor left."""

    def before(*args: Any, **kwargs: Any) -> Any:
        state = enter(args, kwargs)
        if state is _UNRECORDED:
            return None
        try:
            return state, inner.before(*args, **kwargs)
        except BaseException:
            leave(state)
            raise

    def after(token: Any, result: Any) -> None:
        state, inner_token = token
        leave(state)
        if inner_token is not None:
            inner.after(inner_token, result)

    def failed(token: Any, exc: BaseException) -> None:
        state, inner_token = token
        leave(state)
        if inner_token is not None:
            inner.failed(inner_token, exc)

    return _Recording(before=before, after=after, failed=failed)


def _python_recorded_call(original: Callable[..., Any], recording: _Recording) -> Any:
    """``_fasthook.RecordedCall`` in Python, where it was not built: its frame is on the
    stack while the original runs, under ``RECORDS_ONLY_NAME``."""
    before, after, failed = recording.before, recording.after, recording.failed

    def recorded_call(*args: Any, **kwargs: Any) -> Any:
        token = before(*args, **kwargs)
        if token is None:
            return original(*args, **kwargs)
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            failed(token, exc)
            raise
        after(token, result)
        return result

    return _records_only(recorded_call)


def _fast_hook_type() -> Any:
    """The compiled wrapper's type, or None where it was not built or is switched off."""
    from fr_otel.config import pure_python

    if pure_python():
        return None
    try:
        from fr_otel.recorder._fasthook import FastHook
    except ImportError as exc:  # no compiler at install, Python 3.10, another interpreter
        logger.info("fr_otel: the compiled wrapper is not available (%s): using Python's", exc)
        return None
    return FastHook


class _Hook:
    """One patched function: argument positions resolved once, at install."""

    def __init__(self, name: str, spec: _Spec, original: Callable[..., Any]) -> None:
        self.name = name
        self.spec = spec
        self.original = original
        params = list(inspect.signature(original).parameters)
        self.positions = {p: i for i, p in enumerate(params)}
        # the hot path reads these straight from args/kwargs
        big = len(params) + 1
        self.group_at = self.positions.get("group", big)
        self.inputs_at = self.positions.get(spec.inputs, big) if spec.inputs else big
        self.outputs_at = self.positions.get(spec.outputs, big) if spec.outputs else big
        self.async_at = self.positions.get("async_op", big)

    def arg(self, args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None) -> Any:
        if name is None:
            return None
        if name in kwargs:
            return kwargs[name]
        position = self.positions.get(name)
        if position is not None and position < len(args):
            return args[position]
        return None


class Capture:
    """Patches ``torch.distributed`` for one recorder; ``unpatch`` restores it."""

    def __init__(self, recorder: Recorder, stack_depth: int) -> None:
        self.recorder = recorder
        self.stack_depth = stack_depth
        self._patched: list[tuple[Any, str, Any]] = []
        self._groups: dict[Any, _Known] = {}
        """group argument (None = default) -> (index, info, timeout ns, backend by device,
        backend of ops whose device has none of its own)."""
        self._fast_groups: dict[Any, tuple[int, bool]] = {}
        """The groups of ``_groups`` that run every op on one backend -> (index, does that
        backend queue ops), for the compiled wrapper."""
        self._index_of: dict[tuple[str, tuple[int, ...] | None], int] = {}
        """(group name, members) -> the ring group its calls record into now (a new one
        after each change of the group's timeout)."""
        self._core: Any = None
        """The compiled hooks' hold on the ring (``_fasthook.Core``), when they are used."""
        self._seq: list[Callable[[], int]] = []
        """Group index -> the group's collective sequence number so far: torch's own
        ``_get_sequence_number_for_group``, the ordinal its Flight Recorder writes, so that
        rows join torch's entries even when collectives bypass these hooks (DDP's reducer,
        functional collectives)."""
        self._p2p_seq: list[int] = []
        self.counters: dict[str, Callable[[], int]] = {}
        """Group name -> its collective counter in FR's numbering (what ``_seq`` holds)."""
        self._hidden_ops: list[int] = []
        """Group index -> gloo op numbers taken by sends and receives no hook saw."""
        self._op_counters: list[Callable[[], int] | None] = []
        """Group index -> gloo's own op counter, for its groups."""
        self._tensor_type: Any = None
        """``torch.Tensor``, set by ``patch`` (this module does not import torch)."""
        self._library: dict[int, bool] = {}
        """id(code) -> is it torch's (or fr_otel's) own frame. Keyed by id: hashing a code
        object hashes its constants, which for a module's code is every function in the
        file: a cost that grows with the file, paid on every call."""
        self._codes: dict[int, CodeType] = {}
        """Keeps the code objects of ``_library`` alive, so their ids stay theirs."""
        self._local = threading.local()
        self._recent_sites: dict[tuple[int, int, int, int], tuple[int, Any, Any]] = {}
        """(id(caller), its f_lasti, id(parent), its f_lasti) -> (site, caller's code,
        parent's code), the wrapper's shortcut past the frame walk."""
        self.unfinished: dict[int, Any] = {}
        """record id -> async work without a future (gloo's isend/irecv), polled by the watch."""
        self.timeouts_ns: dict[int, int] = {}
        """Group index -> how long one of its ops may run (the watch checks the ring)."""
        self.errors = 0
        self._warned = False

    # --- patching ----------------------------------------------------------------------

    def patch(self) -> None:
        import torch
        import torch.distributed as dist

        self._tensor_type = torch.Tensor
        from torch.distributed import distributed_c10d as c10d

        fast_hook = _fast_hook_type()
        if fast_hook is not None:
            from fr_otel.recorder._fasthook import Core

            self._core = Core()
            writer = self.recorder.ring
            if writer is not None:
                self.attach(writer)
        for name, spec in SPECS.items():
            original = getattr(c10d, name, None)
            if original is None or _delegates(original):
                continue
            hook = _Hook(name, spec, original)
            if name in _P2P:
                wrapper = self._guarded(hook)
            elif name == "monitored_barrier":
                wrapper = self._counting_hidden_ops(hook)
            elif fast_hook is not None:
                wrapper = self._compiled(fast_hook, hook)
            else:
                wrapper = self._wrapper(hook)
            self._patched.append((c10d, name, original))
            setattr(c10d, name, wrapper)
            if getattr(dist, name, None) is original:
                self._patched.append((dist, name, original))
                setattr(dist, name, wrapper)
        self._patch_group_creation(c10d, dist)
        destroy = c10d.destroy_process_group

        def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
            with contextlib.suppress(Exception):  # never fail the user's teardown
                group = args[0] if args else kwargs.get("group")
                self.recorder.group_destroying(group is None or group is c10d._get_default_group())
            self._forget_groups()  # ids may be reused by the next groups
            return destroy(*args, **kwargs)

        modules: tuple[Any, ...] = (c10d, dist)
        for module in modules:
            if getattr(module, "destroy_process_group", None) is destroy:
                self._patched.append((module, "destroy_process_group", destroy))
                module.destroy_process_group = destroy_process_group
        self._patch_timeout_change(c10d)

    def _patch_timeout_change(self, c10d: Any) -> None:
        """Frameworks change a group's timeout while it runs (torchtitan lowers every
        group's after the first step): the next call describes the group again, so its
        records carry the new timeout and the watch calls it overdue by the new one."""
        set_timeout = getattr(c10d, "_set_pg_timeout", None)
        if set_timeout is None:
            return

        def _set_pg_timeout(*args: Any, **kwargs: Any) -> Any:
            result = set_timeout(*args, **kwargs)
            self._forget_groups()
            return result

        functools.update_wrapper(_set_pg_timeout, set_timeout)
        self._patched.append((c10d, "_set_pg_timeout", set_timeout))
        c10d._set_pg_timeout = _set_pg_timeout

    def _forget_groups(self) -> None:
        """Describe every group again at its next call."""
        self._groups.clear()
        self._fast_groups.clear()
        if self._core is not None:
            self._core.invalidate()

    def _patch_group_creation(self, c10d: Any, dist: Any) -> None:
        """Start the recorder when a process group is created, not at the first recorded
        collective: a job whose collectives all come from C++ (DDP) or functional
        collectives must have its ring, watch, store channel and signal handlers too.
        Every way of making a group registers it through ``_register_pg_in_world``
        (``new_group``, ``new_subgroups``, ``split_group``, ``init_device_mesh``); the
        default group is registered before it becomes the default, so
        ``init_process_group`` starts the recorder once it returns."""
        recorder = self.recorder
        register = getattr(c10d, "_register_pg_in_world", None)
        if register is not None:

            def register_pg_in_world(*args: Any, **kwargs: Any) -> Any:
                result = register(*args, **kwargs)
                recorder.group_created()
                return result

            self._patched.append((c10d, "_register_pg_in_world", register))
            c10d._register_pg_in_world = register_pg_in_world
        init = c10d.init_process_group

        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            result = init(*args, **kwargs)
            recorder.group_created()
            return result

        functools.update_wrapper(init_process_group, init)
        for module in (c10d, dist):
            if getattr(module, "init_process_group", None) is init:
                self._patched.append((module, "init_process_group", init))
                module.init_process_group = init_process_group

    def _counting_hidden_ops(self, hook: _Hook) -> Callable[..., Any]:
        """``monitored_barrier`` with the op numbers its inner sends and receives take
        on gloo noted, so the collectives after it keep FR's numbers."""

        def enter(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            try:
                group = hook.arg(args, kwargs, "group")
                known = self._groups.get(group) or self._group(group)
                if known is not None:
                    counter = self._op_counters[known[0]]
                    if counter is not None:
                        return known[0], counter, counter()
            except Exception as exc:
                self._failed_internally(exc)
            return None

        def leave(state: Any) -> None:
            if state is not None:
                index, counter, before = state
                with contextlib.suppress(Exception):
                    extra = counter() - before - MONITORED_BARRIER_SEQS
                    self._hidden_ops[index] += max(extra, 0)

        return self._recorded_call(hook, _around(self._recording(hook), enter, leave))

    @property
    def compiled(self) -> bool:
        """Whether the collectives are wrapped by the compiled wrapper (``_fasthook``)."""
        return self._core is not None

    def attach(self, writer: RingWriter) -> None:
        """Let the compiled hooks write into ``writer``'s ring (the recorder just opened it)."""
        if self._core is None:
            return
        try:
            self._core.attach(
                writer.mapping, writer.capacity, HEADER_SIZE, NEXT_RECORD_OFFSET, layout()
            )
        except ValueError as exc:  # built for another slot layout: calls go to Python
            logger.warning("fr_otel: compiled hook not used (%s); recording in Python", exc)

    def detach(self) -> None:
        """Stop the compiled hooks writing: the ring is about to be closed. (They hold the
        mapping, which cannot be closed while they do.)"""
        if self._core is not None:
            self._core.detach()

    def unpatch(self) -> None:
        for module, name, original in reversed(self._patched):
            setattr(module, name, original)
        self._patched.clear()

    def _failed_internally(self, exc: BaseException) -> None:
        self.errors += 1
        if not self._warned:
            self._warned = True
            logger.warning("fr_otel recorder error (collective not recorded): %r", exc)

    def _guarded(self, hook: _Hook) -> Callable[..., Any]:
        """The wrapper of a point-to-point call, which records nothing when called from
        inside another recorded call."""
        local = self._local

        def enter(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if getattr(local, "inside", False):
                return _UNRECORDED
            local.inside = True
            return None

        def leave(state: Any) -> None:
            local.inside = False

        return self._recorded_call(hook, _around(self._recording(hook), enter, leave))

    def _recorded_call(self, hook: _Hook, recording: _Recording) -> Callable[..., Any]:
        """The function patched in for ``hook``: ``recording`` around its original, called
        from C where ``_fasthook`` is used."""
        if self._core is None:
            call = _python_recorded_call(hook.original, recording)
        else:
            from fr_otel.recorder._fasthook import RecordedCall

            call = RecordedCall(hook.original, recording.before, recording.after, recording.failed)
        return _dressed(call, hook.original)  # type: ignore[no-any-return]

    def _recording(self, hook: _Hook) -> _Recording:
        """``_wrapper``'s recording of a call, in two halves: ``_compiled`` and
        ``_recorded_call`` call the original between them. Not for the repeating case: the
        compiled hook does that without them, and the pure-Python wrapper inline."""
        before = self._wrapper(hook, calls_original=False)
        recorder, settle_later = self.recorder, self._settle_later
        recorded_failure, failed_internally = self._failed, self._failed_internally

        def after(token: tuple[int, bool], result: Any) -> None:
            record, is_async = token
            try:
                writer = recorder.ring
                if writer is None:
                    return
                if is_async and result is not None:
                    settle_later(writer, record, result)
                else:
                    writer.finish(record, COMPLETED)
            except Exception as exc:
                failed_internally(exc)

        def failed(token: tuple[int, bool], exc: BaseException) -> None:
            if not isinstance(exc, Exception):  # an interrupt: as _wrapper, left started
                return
            try:
                recorded_failure(token, exc)
            except Exception as error:
                failed_internally(error)

        return _Recording(before=before, after=after, failed=failed)

    def _compiled(self, fast_hook: Any, hook: _Hook) -> Callable[..., Any]:
        """The compiled wrapper: the repeating case in C, every other call recorded by
        ``_recording``'s halves, which fill the caches the C code reads."""
        recording = self._recording(hook)
        before = recording.before
        spec = hook.spec
        state = HookState(
            core=self._core,
            original=hook.original,
            slow=self._recorded_call(hook, recording),
            recorder=self.recorder,
            groups=self._fast_groups,
            signatures=before.signatures,  # type: ignore[attr-defined]
            owner=before.owner,  # type: ignore[attr-defined]
            recent=self._recent_sites,
            library=self._library,
            seqs=self._seq,
            p2p_seqs=self._p2p_seq,
            op_counters=self._op_counters,
            hidden_ops=self._hidden_ops,
            tensor_type=self._tensor_type,
            settle_later=self._settle_later,
            failed=self._failed,
            failed_internally=self._failed_internally,
            inputs_name=spec.inputs,
            outputs_name=spec.outputs,
            group_at=hook.group_at,
            inputs_at=hook.inputs_at,
            outputs_at=hook.outputs_at,
            async_at=hook.async_at,
            same=before.same,  # type: ignore[attr-defined]
        )
        return _dressed(fast_hook(state), hook.original)  # type: ignore[no-any-return]

    def _wrapper(self, hook: _Hook, *, calls_original: bool = True) -> Callable[..., Any]:
        """The Python wrapper: records the call, calls the original and marks it done. With
        ``calls_original`` False, only its first half (``_recording``'s ``before``): it
        records the call and returns the token, or None where it did not record it."""
        # Everything the wrapper does is inlined here, on closure locals, because of where
        # it runs: right after the previous collective, whose wait let other threads and
        # processes evict this thread's caches. There each Python call, attribute lookup
        # and temporary costs several times what a warm micro benchmark shows, so the
        # common case (a known group, signature and call site) makes no Python call but
        # the original's; the rest goes to the methods below.
        original = hook.original
        spec = hook.spec
        op, collective, blocking = spec.op, spec.kind == "collective", spec.blocking
        group_at, inputs_at, outputs_at = hook.group_at, hook.inputs_at, hook.outputs_at
        async_at = hook.async_at
        inputs_name, outputs_name = spec.inputs or "", spec.outputs or ""
        # all_reduce, broadcast, reduce: one tensor is both, read its shape once
        same = spec.inputs is not None and spec.inputs == spec.outputs and inputs_at == outputs_at
        recorder, groups, seqs, p2p_seqs = self.recorder, self._groups, self._seq, self._p2p_seq
        recent, library = self._recent_sites, self._library
        tensor_type = self._tensor_type
        getframe, time_ns = sys._getframe, time.time_ns
        pack_slot, pack_done = SLOT.pack_into, DONE.pack_into
        # (shape, dtype) -> signature, for ops of one tensor in groups of one backend
        signatures: dict[Any, int] = {}
        owner: list[Any] = [None]
        failed, failed_internally = self._failed, self._failed_internally

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            record = -1
            is_async = False
            try:
                count = len(args)
                if count > group_at:
                    group = args[group_at]
                else:
                    group = kwargs.get("group") if kwargs else None
                known = groups.get(group) or self._group(group)
                writer = recorder.ring
                if known is not None and writer is not None:
                    index, info, _, by_device, fallback = known
                    if count > inputs_at:
                        inputs = args[inputs_at]
                    else:
                        inputs = kwargs.get(inputs_name) if kwargs else None
                    if type(inputs) is tensor_type:
                        in_key: Any = (inputs.shape, inputs.dtype)
                    else:
                        in_key = _shape_key(inputs)
                    out_key: Any
                    outputs: Any
                    if same:
                        outputs, out_key = inputs, in_key
                    else:
                        if count > outputs_at:
                            outputs = args[outputs_at]
                        else:
                            outputs = kwargs.get(outputs_name) if kwargs else None
                        if type(outputs) is tensor_type:
                            out_key = (outputs.shape, outputs.dtype)
                        else:
                            out_key = _shape_key(outputs)
                    if by_device:  # one backend per device only in groups made without naming one
                        device = _device_type(inputs if inputs is not None else outputs)
                        backend = by_device.get(device) or fallback
                        signature = None
                    else:
                        device, backend = None, fallback
                        # the writer's key holds the op and the device (None here): this
                        # hook's own dict, keyed by the tensors alone, skips hashing those.
                        # Its indexes are one writer's: forget them if another ever opens.
                        # The compiled wrapper reads it with the same keys
                        if writer is not owner[0]:
                            signatures.clear()
                            owner[0] = writer
                        signature = signatures.get(in_key if same else (in_key, out_key))
                    if signature is None:
                        sig_key = (op, device, in_key, out_key)
                        signature = writer.signatures.get(sig_key)
                        if signature is None:
                            signature = self._new_signature(
                                writer, sig_key, spec, inputs, outputs, backend
                            )
                        if device is None and len(signatures) < 4096:
                            signatures[in_key if same else (in_key, out_key)] = signature
                    # A training loop issues its collectives from one long-lived frame, at a
                    # few places, and the stack above a live frame cannot change: the
                    # innermost user frame and its parent (identity, code, instruction) find
                    # the call site again without the full walk. Codes are compared too,
                    # since a dead frame's id can be reused by a new frame. The instruction
                    # offset, not the line: f_lineno scans the code's line table up to it,
                    # which in a long training function costs more than all the rest.
                    frame = getframe(1)
                    if library.get(id(frame.f_code)) is False:
                        caller: FrameType | None = frame
                    else:
                        caller = self._user_frame(frame)
                    if caller is not None:
                        parent = caller.f_back
                        if parent is not None:
                            quick = (id(caller), caller.f_lasti, id(parent), parent.f_lasti)
                            parent_code = parent.f_code
                        else:
                            quick, parent_code = (id(caller), caller.f_lasti, 0, -1), None
                        hit = recent.get(quick)
                        if hit is not None and hit[1] is caller.f_code and hit[2] is parent_code:
                            site = hit[0]
                        else:
                            site = self._call_site(writer, caller, quick, parent_code)
                    else:
                        site = self._call_site(writer, None, None, None)
                    if collective:
                        seq = seqs[index]() + 1
                        p2p_seq = p2p_seqs[index]
                        peer = -1
                    else:
                        seq = _current_seq(seqs[index])
                        p2p_seq = p2p_seqs[index] + 1
                        p2p_seqs[index] = p2p_seq
                        peer = self._peer(hook, args, kwargs, info)
                    # RingWriter.begin, inlined
                    record = writer.next_record
                    # NCCL marks even an async op's future complete once it is queued: only
                    # torch's FR knows when it ran (frmerge reads it at flush time)
                    queued = backend in QUEUED_BACKENDS
                    pack_slot(
                        writer.mapping,
                        HEADER_SIZE + (record % writer.capacity) * SLOT_SIZE,
                        record,
                        index,
                        seq,
                        p2p_seq,
                        signature,
                        site,
                        peer,
                        time_ns(),
                        0,
                        SCHEDULED if queued else STARTED,
                    )
                    # only now: a reader that sees the new count finds the slot written
                    writer.next_record = record + 1
                    if queued:
                        record = -1
                    elif not blocking:
                        is_async = True
                    elif count > async_at:
                        is_async = bool(args[async_at])
                    elif kwargs:
                        is_async = bool(kwargs.get("async_op"))
            except Exception as exc:
                failed_internally(exc)
                record = -1
            if not calls_original:
                return (record, is_async) if record >= 0 else None
            if record < 0:
                return original(*args, **kwargs)
            try:
                result = original(*args, **kwargs)
            except Exception as exc:
                failed((record, is_async), exc)
                raise
            try:
                writer = recorder.ring
                if writer is not None:
                    if not is_async or result is None:
                        # RingWriter.finish, inlined, with arithmetic for its read-back:
                        # the slot is still this record's unless a whole ring of records
                        # began since (RingWriter.finish, called from callbacks and the
                        # watch thread, reads the slot's record id instead)
                        capacity = writer.capacity
                        if writer.next_record - record <= capacity:
                            offset = HEADER_SIZE + (record % capacity) * SLOT_SIZE + DONE_OFFSET
                            pack_done(writer.mapping, offset, time_ns(), COMPLETED)
                    else:
                        self._settle_later(writer, record, result)
            except ValueError:  # the ring was closed at exit during the call
                pass
            except Exception as exc:
                failed_internally(exc)
            return result

        if calls_original:  # its frame is on the stack while the original runs
            _records_only(wrapper)
        _dressed(wrapper, original)
        # what _compiled hands the C code
        wrapper.signatures = signatures  # type: ignore[attr-defined]
        wrapper.owner = owner  # type: ignore[attr-defined]
        wrapper.same = same  # type: ignore[attr-defined]
        return wrapper

    # --- recording ---------------------------------------------------------------------

    def _group(self, group: Any) -> _Known | None:
        known = self._groups.get(group)
        if known is not None:
            return known
        from torch.distributed import distributed_c10d as c10d

        if not c10d.is_initialized():
            return None
        writer = self.recorder.writer()
        if writer is None:
            return None
        pg = group if group is not None else c10d._get_default_group()
        if c10d._rank_not_in_group(pg):
            return None
        info, timeout_ns, by_device = describe_backends(pg)
        # one ring group per (group, timeout): records carry the timeout they ran under
        index = writer.intern_group((info.name, info.ranks, info.timeout_ms), info)
        while len(self._seq) <= index:
            self._seq.append(_OwnSequence())
            self._p2p_seq.append(0)
            self._hidden_ops.append(0)
            self._op_counters.append(None)
        earlier = self._index_of.get((info.name, info.ranks))
        if earlier is not None and earlier != index:
            # the same group under a new timeout: its own counts go on from there
            self._p2p_seq[index] = self._p2p_seq[earlier]
            self._hidden_ops[index] = self._hidden_ops[earlier]
            if isinstance(self._seq[earlier], _OwnSequence):
                self._seq[index] = self._seq[earlier]
        self._index_of[(info.name, info.ranks)] = index
        counter = _sequence_of(pg, self._seq[index])
        if info.backend == "gloo" and not by_device and not isinstance(counter, _OwnSequence):
            self._op_counters[index] = counter
            counter = _without_p2p(counter, self._p2p_seq, self._hidden_ops, index)
        self._seq[index] = counter
        if not isinstance(counter, _OwnSequence):  # calling that one counts a collective
            self.counters[info.name] = counter
        timeout = detection_timeout_ns(timeout_ns, self.recorder.settings.timeout_s)
        known = (index, info, timeout, by_device, info.backend or "")
        self.timeouts_ns[index] = known[2]
        self._groups[group] = known
        if not by_device:
            self._fast_groups[group] = (index, known[4] in QUEUED_BACKENDS)
        return known

    def _user_frame(self, frame: FrameType | None) -> FrameType | None:
        """The first frame from ``frame`` outwards that is not torch's (or ours)."""
        library = self._library
        while frame is not None:
            code = frame.f_code
            code_id = id(code)
            is_library = library.get(code_id)
            if is_library is None:
                self._codes[code_id] = code
                is_library = library[code_id] = is_library_frame({"filename": code.co_filename})
            if not is_library:
                return frame
            frame = frame.f_back
        return None

    def _site(self, frame: FrameType | None) -> tuple[int, ...]:
        """The user frames of the stack, innermost first, as (id(code), line, ...)."""
        key: list[int] = []
        frame = self._user_frame(frame)
        while frame is not None and len(key) < 2 * self.stack_depth:
            key.append(id(frame.f_code))
            key.append(frame.f_lineno)
            frame = self._user_frame(frame.f_back)
        return tuple(key)

    def _call_site(
        self,
        writer: Any,
        caller: FrameType | None,
        quick: tuple[int, int, int, int] | None,
        parent_code: CodeType | None,
    ) -> int:
        """The site of the stack from ``caller`` (the innermost user frame) outwards, by the
        full walk; remembered under ``quick`` for the wrapper's next call from there."""
        key = self._site(caller)
        site = writer.sites.get(key)
        if site is None:
            site = self._new_site(writer, key)
        if quick is not None and caller is not None:
            if len(self._recent_sites) > 256:
                self._recent_sites.clear()
            self._recent_sites[quick] = (site, caller.f_code, parent_code)
        return int(site)

    @staticmethod
    def _new_signature(
        writer: Any, key: Any, spec: _Spec, inputs: Any, outputs: Any, backend: str
    ) -> int:
        ins, outs = _tensors(inputs), _tensors(outputs)
        index: int = writer.intern_signature(
            key,
            Signature(
                op=spec.op,
                input_sizes=[list(t.shape) for t in ins],
                output_sizes=[list(t.shape) for t in outs],
                input_dtypes=[_dtype_name(t.dtype) for t in ins],
                output_dtypes=[_dtype_name(t.dtype) for t in outs],
                is_p2p=spec.kind != "collective",
                backend=backend,
            ),
        )
        return index

    def _new_site(self, writer: Any, key: tuple[int, ...]) -> int:
        codes = [self._codes[code_id] for code_id in key[::2]]
        frames = [
            (code.co_name, code.co_filename, line)
            for code, line in zip(codes, key[1::2], strict=True)
        ]
        index: int = writer.intern_site(key, frames)
        return index

    @staticmethod
    def _peer(hook: _Hook, args: tuple[Any, ...], kwargs: dict[str, Any], info: GroupInfo) -> int:
        peer = hook.arg(args, kwargs, "dst" if hook.spec.kind == "send" else "src")
        if peer is not None:
            return int(peer)
        local = hook.arg(args, kwargs, "group_dst" if hook.spec.kind == "send" else "group_src")
        if local is not None and info.ranks is not None and 0 <= local < len(info.ranks):
            return int(info.ranks[local])
        return -1

    def _settle_later(self, writer: Any, record: int, result: Any) -> None:
        """Mark an async op's slot when its work finishes."""
        try:
            future = result.get_future()
        except Exception:  # gloo's send/recv works have no future: the watch polls them
            if len(self.unfinished) < MAX_UNFINISHED:
                self.unfinished[record] = result
            return

        def settled(fut: Any) -> None:
            try:
                fut.value()
            except Exception as exc:  # reported as the op's failure
                writer.finish(record, FAILED)
                writer.note_error(record, repr(exc))
                return
            writer.finish(record, COMPLETED)

        future.add_done_callback(settled)

    def poll_unfinished(self) -> None:
        """Mark the polled works (those without a future) that have completed since."""
        writer = self.recorder.ring
        if writer is None:
            return
        for record, work in list(self.unfinished.items()):
            try:
                if not work.is_completed():
                    continue
                failed = not work.is_success()
            except Exception:  # a work that cannot say: stop asking
                failed = False
            self.unfinished.pop(record, None)
            writer.finish(record, FAILED if failed else COMPLETED)

    def _failed(self, token: tuple[int, bool | None], exc: BaseException) -> None:
        record = token[0]
        writer = self.recorder.ring
        if writer is not None:
            writer.finish(record, FAILED)
            writer.note_error(record, repr(exc))
        self.recorder.collective_failed(record, exc)
