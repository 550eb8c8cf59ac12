"""A decoded ring as canonical rows (``fr_otel.schema.RECORD_SCHEMA``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from fr_otel.recorder.ring import COMPLETED, FAILED, STATE_NAMES, RingContents
from fr_otel.schema import RECORD_SCHEMA
from fr_otel.stacks import call_site


def ring_table(
    contents: RingContents,
    *,
    job: str,
    incident: str,
    dump_time_ns: int,
    first_record: int = 0,
    completed_only: bool = False,
) -> pa.Table:
    """The ring's slots from ``first_record`` on as rows of ``job``/``incident``.

    ``completed_only`` keeps the finished (completed or failed) slots: what continuous
    mode exports while the job runs.
    """
    columns: dict[str, list[Any]] = {name: [] for name in RECORD_SCHEMA.names}
    site_cache: dict[int, tuple[list[dict[str, Any]], str | None]] = {}
    for slot in contents.slots:
        record, group, seq, p2p_seq, sig, site, peer, created, done, state = slot
        if record < first_record or (completed_only and state not in (COMPLETED, FAILED)):
            continue
        info = contents.groups.get(group)
        signature = contents.signatures.get(sig)
        if info is None or signature is None:
            continue  # the owner died between writing the slot and its meta line
        if site not in site_cache:
            frames = [
                {"name": name, "filename": filename, "line": line}
                for name, filename, line in contents.sites.get(site, [])
            ]
            site_cache[site] = (frames, call_site(frames))
        frames, where = site_cache[site]
        backend = signature.backend or info.backend
        completed = state == COMPLETED
        columns["job"].append(job)
        columns["incident"].append(incident)
        columns["rank"].append(contents.rank)
        columns["pg_id"].append(group)
        columns["pg_name"].append(info.name)
        columns["pg_desc"].append(info.desc)
        columns["pg_ranks"].append(list(info.ranks) if info.ranks is not None else None)
        columns["pg_ranks_inferred"].append(False)
        columns["record_id"].append(record)
        columns["collective_seq_id"].append(seq)
        columns["p2p_seq_id"].append(p2p_seq)
        columns["op_id"].append(None)
        columns["backend"].append(backend)
        columns["op"].append(signature.op)
        columns["profiling_name"].append(f"{backend}:{signature.op}" if backend else signature.op)
        columns["peer"].append(peer if peer >= 0 else None)
        columns["input_sizes"].append(signature.input_sizes)
        columns["output_sizes"].append(signature.output_sizes)
        columns["input_dtypes"].append(signature.input_dtypes)
        columns["output_dtypes"].append(signature.output_dtypes)
        columns["state"].append(STATE_NAMES.get(state, "started"))  # failed: never completed
        columns["time_created_ns"].append(created)
        columns["time_started_ns"].append(None)
        columns["time_completed_ns"].append(done if completed and done else None)
        columns["duration_ms"].append(None)
        # FR's "retired" means the op left the watchdog's list; for the recorder that is
        # completion, so a failed op stays unretired and reads as never completed
        columns["retired"].append(completed)
        columns["timeout_ms"].append(info.timeout_ms)
        columns["is_p2p"].append(signature.is_p2p)
        columns["thread_name"].append(None)
        columns["thread_id"].append(None)
        columns["frames"].append(frames or None)
        columns["call_site"].append(where)
        columns["pg_last_enqueued_seq"].append(None)
        columns["pg_last_started_seq"].append(None)
        columns["pg_last_completed_seq"].append(None)
        columns["dump_time_ns"].append(dump_time_ns)
        columns["source_file"].append(str(contents.base) + ".ring")
        columns["source_format"].append("recorder")
        columns["fr_version"].append(None)
        columns["comm_lib_version"].append(None)
    return pa.Table.from_pydict(columns, schema=RECORD_SCHEMA)
