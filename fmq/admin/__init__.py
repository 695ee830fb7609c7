"""Offline tools for a stopped broker's data directory: cut the log (:mod:`.repair`),
rebuild the index (:mod:`.rebuild_index`), list open transactions from the log
(:mod:`.transactions`)."""
