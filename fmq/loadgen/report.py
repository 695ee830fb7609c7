"""The result of a benchmark run: the merged totals and what they mean, as text or as one
JSON object (``fmq bench --json``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class BenchReport:
    kind: str
    producers: int
    processes: int
    size: int
    pipeline: int
    batch: int
    duration_s: float
    elapsed_s: float
    messages: int
    operations: int
    bytes: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    errors: dict[str, int]
    first_error: str | None
    server_cpu_us_per_msg: float | None
    client_cpu_pct: float
    loop: str
    count_check: str  # "ok", or what does not match
    broker_count: int | None
    server: str = ""  # the node loaded: the primary of a broker group
    commit_with_next: bool = False  # tx: each COMMIT written with the next PREPARE

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.elapsed_s / 1e6 if self.elapsed_s > 0 else 0.0

    @property
    def ok(self) -> bool:
        return self.count_check == "ok" and not self.errors and self.messages > 0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["msgs_per_s"] = round(self.msgs_per_s, 1)
        out["mb_per_s"] = round(self.mb_per_s, 3)
        out["error_count"] = sum(self.errors.values())
        return out

    def text(self) -> str:
        what = {"produce": "sends", "consume": "pulls",
                "tx": "transactions (1 message)" + (", each COMMIT written with the next "
                                                    "PREPARE" if self.commit_with_next
                                                    else "")}
        lines = [
            f"fmq bench {self.kind}: {_plural(self.producers, 'connection')} in "
            f"{_plural(self.processes, 'process', 'processes')} ({self.loop}), "
            f"{self.size:,} B bodies, pipeline {self.pipeline}"
            + (f", batches of {self.batch}" if self.batch > 1 else "")
            + f", {what[self.kind]}",
            f"  server          {self.server:>12}",
            f"  messages        {self.messages:>12,} in {self.elapsed_s:.2f} s",
            f"  throughput      {self.msgs_per_s:>12,.0f} msg/s   {self.mb_per_s:10.2f} MB/s",
            f"  latency (ms)    p50 {self.p50_ms:.3f}   p99 {self.p99_ms:.3f}   "
            f"p999 {self.p999_ms:.3f}   max {self.max_ms:.3f}",
            f"  errors          {sum(self.errors.values()):>12,}"
            + (f"   ({', '.join(f'{name} {n:,}' for name, n in sorted(self.errors.items()))}"
               f"; first: {self.first_error})" if self.errors else ""),
            "  server CPU      " + (f"{self.server_cpu_us_per_msg:>12.1f} us/msg"
                                    if self.server_cpu_us_per_msg is not None
                                    else "         n/a (the server does not report it)"),
            f"  client CPU      {self.client_cpu_pct:>12.0f} % of one core per process",
            f"  count check     {self.count_check}"
            + (f" (broker holds {self.broker_count:,})" if self.broker_count is not None else ""),
        ]
        return "\n".join(lines)


def _plural(n: int, noun: str, nouns: str | None = None) -> str:
    # fmq.units is not among what a client-side package may import (docs/design.md).
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"
