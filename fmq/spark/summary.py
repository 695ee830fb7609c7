"""The human summary of a Spark rebuild (``python -m fmq.spark.rebuild``, ``fmq index rebuild
--spark``): counts, sizes and times, one aligned line each. Lists (the open transactions) are
counted, never printed: ``--json`` has them in full."""

from __future__ import annotations

from fmq.units import NONE, count, plural, size


def summary_text(result: dict) -> str:
    """``result`` of :func:`fmq.spark.rebuild.run_rebuild` for people."""
    torn = result["torn_tail"]
    cp = result["checkpoint"]
    parquet = result["parquet"]
    phases = result["phase_seconds"]
    lines = [
        ("data dir", result["data_dir"]),
        ("index", result["index_dir"]),
        ("spark", f"{result['spark_version']} on {result['master']}"),
        ("log", f"{plural(result['segments'], 'segment')}, offsets {count(result['log_start'])}"
                f" .. {count(result['log_end'])} ({size(result['log_bytes'])})"),
        ("records", count(result["records"])),
        ("queue entries", f"{count(result['queue_entries'])} in "
                          f"{plural(result['queues'], 'queue')} "
                          f"({count(result['queues_carried_over'])} carried over, "
                          f"{result['queue_floors_applied']} raised to their floors)"),
        ("key entries", count(result["key_entries"])),
        ("consumer offsets", f"{count(result['consumer_offsets'])} "
         + ("from the log" if result["consumer_offsets_from_log"] else
            "carried from the old index (written to the log on the next open)")),
        ("torn tail", NONE if torn is None else
         f"at {count(torn['offset'])} in {torn['segment']}: {torn['reason']} (cut)"),
        ("open transactions", f"{count(len(result['open_transactions']))} (listed by --json)"
         if result["open_transactions"] else "0"),
        ("checkpoint", f"recovery from {count(cp['recovery_offset'])}, log end "
                       f"{count(cp['log_end'])}"),
        ("parquet", NONE if not parquet else ", ".join(sorted(parquet.values()))),
        ("seconds", ", ".join(f"{name} {secs:.2f}" for name, secs in phases.items())
         + f" (total {sum(phases.values()):.2f})"),
    ]
    width = max(len(name) for name, _ in lines)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in lines)
