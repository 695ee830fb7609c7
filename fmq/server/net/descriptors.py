"""Fit ``max_connections`` under the process's open-file limit (RLIMIT_NOFILE) at start.

Every connection holds a descriptor, and so does the broker: one per log segment, the LMDB
files, the data-directory lock. A roll needs more for a moment (the new segment, the
directory fsync), a checkpoint one. If idle connections take every descriptor, the next
segment cannot be created and writes are refused until connections close. So the server
keeps ``descriptor_reserve`` descriptors free beyond what is open once the broker is open:
it raises the soft limit toward the hard limit when the connections need it, and when even
the hard limit is too low it serves fewer connections and says so, rather than accept
connections it cannot serve.
"""

from __future__ import annotations

import logging
import os
import resource

from fmq.errors import ConfigError

logger = logging.getLogger("fmq.server")


def open_descriptors() -> int:
    """How many descriptors this process holds now."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # minus the listing's own descriptor
    except OSError:  # no /proc: probe every number below the limit
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        count = 0
        for fd in range(min(soft, 65_536)):
            try:
                os.fstat(fd)
            except OSError:
                continue
            count += 1
        return count


def fit_connections(max_connections: int, reserve: int) -> int:
    """The number of connections to serve: ``max_connections`` when it fits under
    RLIMIT_NOFILE next to the descriptors open now plus ``reserve`` (raising the soft limit
    up to the hard one if needed), else the most that fit, with a warning.
    Raises ConfigError when not a single connection fits."""
    in_use = open_descriptors()
    needed = max_connections + in_use + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                logger.info("raised the open-file limit (RLIMIT_NOFILE) from %d to %d for "
                            "%d connections, %d open descriptors and a reserve of %d",
                            soft, target, max_connections, in_use, reserve)
                soft = target
            except (ValueError, OSError) as exc:  # e.g. above fs.nr_open
                logger.warning("could not raise the open-file limit from %d to %d: %s",
                               soft, target, exc)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return max_connections
    fits = soft - in_use - reserve
    advice = (f"raise the limit (`ulimit -n`, systemd LimitNOFILE=) to at least {needed}, "
              f"or lower max_connections")
    if fits < 1:
        raise ConfigError(
            f"the open-file limit ({soft}, hard {hard}) leaves no descriptor for connections: "
            f"{in_use} are open and descriptor_reserve keeps {reserve} for segments, the "
            f"index and checkpoints; {advice}")
    logger.warning("max_connections lowered from %d to %d: the open-file limit is %d (hard "
                   "%d), %d descriptors are open and descriptor_reserve keeps %d for segments, "
                   "the index and checkpoints; %s", max_connections, fits, soft, hard, in_use,
                   reserve, advice)
    return fits
