"""An idempotent message that waited for buffer room takes its sequence number when it
enters the queue: messages sent meanwhile must not push it below the server's dedup
window (a real server on 127.0.0.1 with a small ``dedup_window_messages``)."""

from __future__ import annotations

import asyncio

from fmq.client.aio import AsyncProducer

WINDOW = 5


def test_a_message_overtaken_while_it_waited_for_room_is_still_stored(start_server):
    server = start_server({"dedup_window_messages": WINDOW})

    async def run() -> list:
        # A buffer of 1 byte holds one unanswered message at a time.
        async with AsyncProducer(server.address, buffer_memory=1, linger_ms=0,
                                 dedup_window_messages=WINDOW) as p:
            first = await p.send_async("t", b"first")
            waiting = asyncio.ensure_future(p.send_async("t", b"waited"))
            await asyncio.sleep(0)  # it numbers its message, then waits for room
            sent = [await first]
            for i in range(4 * WINDOW):  # each gets in before the waiting one resumes
                sent.append(await (await p.send_async("t", f"m{i}".encode())))
            sent.append(await asyncio.wait_for(await waiting, 30))
            return sent

    results = asyncio.run(run())
    assert len({r.offset for r in results}) == 4 * WINDOW + 2
