"""The console: pages in a browser over the server's own operations (docs/console.md).

It runs beside the broker in a thread with its own event loop (:mod:`.server`), never on
the send path's loop; every figure it shows comes from the handler the wire protocol runs
for the same question (:mod:`.gateway`), under the same access rules.
"""
