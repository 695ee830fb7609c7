"""Replication: a primary ships its durable log to followers that keep byte-identical
copies (docs/replication.md). :mod:`chunks` cuts and checks the shipped bytes,
:mod:`insync` is the primary's view of its followers (the in-sync set, the ``sync``
acknowledgement), :mod:`follower` is the follower's copying thread."""
