"""The slot layout is defined once (``recorder/slot.py``); the compiled hook agrees with it
or refuses the ring, and reads its state from one typed object."""

from __future__ import annotations

import mmap
import struct

import pytest

from fr_otel.recorder import slot

fasthook = pytest.importorskip(
    "fr_otel.recorder._fasthook", reason="the compiled hook is optional: built by make"
)


def test_offsets_follow_the_packed_struct() -> None:
    values = list(range(1, len(slot.FIELDS) + 1))
    packed = slot.SLOT.pack(*values)
    assert len(packed) == slot.SLOT_SIZE == 64
    for (name, code), value in zip(slot.FIELDS, values, strict=True):
        (read,) = struct.unpack_from("<" + code, packed, slot.OFFSETS[name])
        assert read == value, name
    done = bytearray(packed)
    slot.DONE.pack_into(done, slot.DONE_OFFSET, 123, slot.COMPLETED)
    assert slot.SLOT.unpack(bytes(done))[-2:] == (123, slot.COMPLETED)


def test_the_compiled_hook_attaches_to_this_layout_and_refuses_another() -> None:
    core = fasthook.Core()
    buffer = mmap.mmap(-1, 64 + 4 * slot.SLOT_SIZE)
    try:
        core.attach(buffer, 4, 64, 24, slot.layout())
        assert core.attached
        core.detach()
        for key, value in [("state_offset", 57), ("completed", 4), ("slot_size", 72)]:
            with pytest.raises(ValueError, match=key):
                core.attach(buffer, 4, 64, 24, {**slot.layout(), key: value})
            assert not core.attached
        with pytest.raises(ValueError, match="keys"):
            core.attach(buffer, 4, 64, 24, {**slot.layout(), "extra_offset": 60})
    finally:
        core.detach()
        buffer.close()


def test_the_hook_state_is_checked_when_the_hook_is_made() -> None:
    from fr_otel.recorder.capture import HookState

    def nothing(*args: object, **kwargs: object) -> None:
        return None

    fields = dict(
        core=fasthook.Core(),
        original=nothing,
        slow=nothing,
        recorder=None,
        groups={},
        signatures={},
        owner=[],
        recent={},
        library={},
        seqs=[],
        p2p_seqs=[],
        op_counters=[],
        hidden_ops=[],
        tensor_type=object,
        settle_later=nothing,
        failed=nothing,
        failed_internally=nothing,
        inputs_name="tensor",
        outputs_name=None,
        group_at=2,
        inputs_at=0,
        outputs_at=-1,
        async_at=3,
        same=True,
    )
    hook = fasthook.FastHook(HookState(**fields))  # type: ignore[arg-type]
    assert hook.recorded == 0
    with pytest.raises(TypeError, match=r"state\.groups must be dict"):
        fasthook.FastHook(HookState(**{**fields, "groups": []}))  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="core"):
        fasthook.FastHook(object())  # type: ignore[arg-type]
