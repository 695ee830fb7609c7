"""What runs beside the server on threads of its own: the Prometheus endpoint
(``metrics_port``) and companions such as the console (:mod:`fmq.console`, which the
``fmq server`` command adds with ``console_port``). They start with the server and stop
before the broker closes, since their threads read it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from fmq.server.context import ServerContext
from fmq.server.metrics import MetricsEndpoint


class Companion(Protocol):
    """A service beside the server (its own thread); both calls block."""

    def start(self) -> None:
        """Serve (raise ConfigError when it cannot)."""

    def close(self) -> None:
        """Stop serving."""


#: Makes a companion for a started server (its context has the event loop).
CompanionFactory = Callable[[ServerContext], Companion]


class Sidecars:
    """The metrics endpoint and the companions of one server."""

    def __init__(self, factories: list[CompanionFactory] | None = None) -> None:
        self.factories = list(factories or ())
        self.metrics: MetricsEndpoint | None = None
        self.running: list[Companion] = []

    async def start(self, ctx: ServerContext, server_stats: Callable[[], dict[str, Any]]
                    ) -> None:
        cfg = ctx.config
        if cfg.metrics_port:
            self.metrics = MetricsEndpoint(ctx.broker, server_stats, ctx.loop,
                                           cfg.metrics_host, cfg.metrics_port)
        for make in self.factories:
            companion = make(ctx)
            await asyncio.to_thread(companion.start)
            self.running.append(companion)

    async def close(self) -> None:
        for companion in reversed(self.running):
            await asyncio.to_thread(companion.close)
        self.running.clear()
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.close)
