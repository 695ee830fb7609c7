"""The node's figures sampled every ``console_sample_ms``, for the console's pages and
charts.

Pages read the last sample instead of asking the server for its figures on each load (a
script reloading the overview as fast as the console answers costs the send path no more
than one STATS per sample), and the charts draw the rates between consecutive samples over
the last :data:`KEEP_SECONDS`. A sample is the STATS answer and the per-topic traffic
counters (messages and bytes in and out since the broker opened); the pages show each user
only the parts her rules allow.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fmq.console.gateway import ServerGateway
from fmq.errors import FMQError
from fmq.protocol import Op

logger = logging.getLogger("fmq.console")

#: How far back the charts go.
KEEP_SECONDS = 15 * 60


@dataclass(frozen=True)
class Sample:
    """The node at ``at_ms`` (ms since the epoch)."""

    at_ms: int
    stats: dict
    traffic: dict[str, dict[str, int]]
    #: Bytes the log and the index take, and free on the data directory's file system.
    disk: dict[str, int]


def disk_figures(inventory: Any, data_dir: str) -> dict[str, int]:
    """The broker's disk use (a walk of its directories' entries) and the space left."""
    used = inventory.disk_usage()
    return {**used, "free_bytes": shutil.disk_usage(data_dir).free}


@dataclass(frozen=True)
class Rate:
    """Per second between two samples, ending at ``at_ms``."""

    at_ms: int
    value: float


class Sampler:
    """Keeps the last :data:`KEEP_SECONDS` of samples (the console's loop only)."""

    def __init__(self, gateway: ServerGateway, every_s: float) -> None:
        self.gateway = gateway
        self.every_s = every_s
        self.samples: deque[Sample] = deque(maxlen=int(KEEP_SECONDS / every_s) + 1)
        self._sampling = asyncio.Lock()

    async def run(self) -> None:
        """Sample until cancelled; a sample the server cannot give now is skipped."""
        while True:
            try:
                await self.sample()
            except FMQError as exc:
                logger.debug("console: no sample this time (%s)", exc)
            except Exception:  # a bug must not stop the charts for good: said, and again
                logger.exception("console: sampling failed")
            await asyncio.sleep(self.every_s)

    async def recent(self) -> Sample:
        """The last sample, or a new one if there is none of the last two intervals (the
        background loop keeps one there, so pages almost never sample themselves)."""
        latest = self.latest
        if latest is not None and time.time() * 1000 - latest.at_ms < 2000 * self.every_s:
            return latest
        async with self._sampling:
            latest = self.latest
            if latest is not None and time.time() * 1000 - latest.at_ms < 2000 * self.every_s:
                return latest
            return await self.sample()

    async def sample(self) -> Sample:
        stats = json.loads((await self.gateway.internal(Op.STATS, {}))["json"])
        broker = self.gateway.ctx.broker
        inventory = broker.inventory
        traffic = await self.gateway.read_unchecked(inventory.traffic)
        disk = await self.gateway.read_unchecked(disk_figures, inventory, broker.path)
        taken = Sample(int(time.time() * 1000), stats, traffic, disk)
        self.samples.append(taken)
        return taken

    @property
    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def rates(self, count: Callable[[Sample], int]) -> list[Rate]:
        """``count``'s growth per second between consecutive samples. A counter that went
        down (the broker was reopened, as after a role change) starts over: no rate there."""
        out = []
        pairs = zip(list(self.samples), list(self.samples)[1:], strict=False)
        for before, after in pairs:
            seconds = (after.at_ms - before.at_ms) / 1000
            grew = count(after) - count(before)
            if seconds > 0 and grew >= 0:
                out.append(Rate(after.at_ms, grew / seconds))
        return out

    def topic_rates(self, topics: Iterable[str], counter: str) -> list[Rate]:
        """Rates of ``counter`` (messages_in, messages_out, bytes_in, bytes_out) summed over
        ``topics``."""
        names = list(topics)
        return self.rates(lambda s: sum(s.traffic.get(t, {}).get(counter, 0) for t in names))
