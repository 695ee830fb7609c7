"""A node's copy of its cluster's routes: read at start, kept current by a watch and a
periodic re-read, and cached in ``DATA_DIR/routes.json`` so the node starts without etcd
(docs/cluster.md, "Where routes live").

The copy never goes backwards: a read at an older etcd revision than the copy's (a lagging
etcd member, a reply that crossed a newer one) is ignored, and a topic whose stored route
cannot be read keeps the route the copy had.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable

from fmq.coordination.etcd_io import retry_delay
from fmq.coordination.routes import ClusterRoutes, RouteSnapshot
from fmq.datadir import ROUTES_FILE
from fmq.errors import CoordinatorUnavailable, InvalidArgument
from fmq.log.fileio import OS_IO, FileIO
from fmq.topic_route import BrokerGroup, TopicRoute

logger = logging.getLogger("fmq.coordination")

CACHE_FORMAT = 1


def dump_snapshot(cluster: str, snapshot: RouteSnapshot) -> bytes:
    return json.dumps({
        "format": CACHE_FORMAT, "cluster": cluster, "revision": snapshot.revision,
        "etcd_id": snapshot.etcd_id,
        "routes": {t: {"version": r.version, "route": r.to_json()}
                   for t, r in sorted(snapshot.routes.items())},
        "groups": {n: {"primary": g.primary, "epoch": g.epoch,
                       "open_for_writes": g.open_for_writes}
                   for n, g in sorted(snapshot.groups.items())},
    }, sort_keys=True, indent=1).encode()


def load_snapshot(cluster: str, data: bytes) -> RouteSnapshot:
    """The snapshot a cache file holds (InvalidArgument when it is not one of ``cluster``)."""
    try:
        d = json.loads(data)
        if d.get("format") != CACHE_FORMAT or d.get("cluster") != cluster:
            raise ValueError(f"it is of format {d.get('format')!r} and cluster "
                             f"{d.get('cluster')!r}, not {CACHE_FORMAT} and {cluster!r}")
        routes = {t: TopicRoute.from_json(v["route"], int(v["version"]))
                  for t, v in d["routes"].items()}
        groups = {n: BrokerGroup(n, str(g["primary"]), int(g["epoch"]),
                                 bool(g["open_for_writes"])) for n, g in d["groups"].items()}
        return RouteSnapshot(int(d["revision"]), routes, groups, {}, str(d.get("etcd_id", "")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidArgument(f"not a route cache: {exc}") from None


def newer(current: RouteSnapshot, read: RouteSnapshot) -> tuple[RouteSnapshot, bool]:
    """What the copy becomes after ``read``, and whether a route or a group changed (the
    revision alone moves with every write to etcd). Never backwards, within one etcd: an
    etcd of another cluster id (a new one, not a restored backup) counts its revisions anew,
    and its routes replace the copy whole."""
    if read.etcd_id and current.etcd_id and read.etcd_id != current.etcd_id:
        return read, True
    if read.revision < current.revision:
        return current, False
    routes = dict(read.routes)
    for topic in read.damaged:  # unreadable in etcd: keep what the copy had
        if topic in current.routes:
            routes[topic] = current.routes[topic]
    changed = (routes != current.routes or read.groups != current.groups
               or read.etcd_id != current.etcd_id)
    return RouteSnapshot(read.revision, routes, read.groups, {}, read.etcd_id), changed


class RouteFollower:
    """The routes of ``routes.cluster`` as this node knows them: :attr:`snapshot` (an
    immutable value, safe to read from any thread). ``on_change`` runs in the follower's
    thread after each change."""

    def __init__(self, routes: ClusterRoutes, data_dir: str,
                 on_change: Callable[[RouteSnapshot], None] | None = None,
                 resync_s: float = 10.0, io: FileIO = OS_IO) -> None:
        self.routes = routes
        self.path = os.path.join(data_dir, ROUTES_FILE)
        self.on_change = on_change
        self.resync_s = resync_s
        self._io = io
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fmq-route-follower",
                                        daemon=True)
        self._warned = False
        self._poked = False  # a re-read asked by poke() runs now
        self.snapshot: RouteSnapshot = self._load_cache()

    def _load_cache(self) -> RouteSnapshot:
        try:
            with open(self.path, "rb") as f:
                return load_snapshot(self.routes.cluster, f.read())
        except FileNotFoundError:
            return RouteSnapshot(0)
        except (OSError, InvalidArgument) as exc:
            # Only a copy: etcd holds the routes, and the next read replaces the file.
            logger.warning("ignoring the route cache %s (%s); the routes come from %s",
                           self.path, exc, self.routes.coordinator)
            return RouteSnapshot(0)

    def route(self, topic: str) -> TopicRoute | None:
        return self.snapshot.routes.get(topic)

    def start(self) -> RouteFollower:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop following; a watch in progress may hold the thread up to ``resync_s``
        longer, and it writes nothing after this returns."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def poke(self) -> None:
        """Re-read etcd now, in a thread of its own (the follower's may sit in a watch for
        up to ``resync_s``): a client showed a newer route than this copy. One re-read at
        a time; pokes meanwhile are covered by it. Never blocks the caller."""
        with self._lock:
            if self._poked or self._stop.is_set():
                return
            self._poked = True
        threading.Thread(target=self._reread, name="fmq-route-poke", daemon=True).start()

    def _reread(self) -> None:
        try:
            self.sync_once()
        except CoordinatorUnavailable:
            pass  # the follower's own loop says so, and retries
        except Exception:
            logger.exception("could not take the routes from %s", self.routes.coordinator)
        finally:
            with self._lock:
                self._poked = False

    def sync_once(self) -> bool:
        """Read every route once and take it if it is newer; whether the copy changed."""
        read = self.routes.snapshot()
        for topic, why in read.damaged.items():
            logger.warning("keeping this node's copy of the route of %s: %s", topic, why)
        with self._lock:
            if self._stop.is_set():
                return False
            new, changed = newer(self.snapshot, read)
            if changed:
                self._io.write_file_atomically(self.path,
                                               dump_snapshot(self.routes.cluster, new))
            self.snapshot = new  # the revision the next watch starts after
            if not changed:
                return False
        if self.on_change is not None:
            self.on_change(new)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
                self._warned = False
            except CoordinatorUnavailable as exc:
                if not self._warned:
                    logger.warning("%s; this node keeps its copy of the routes meanwhile", exc)
                    self._warned = True
                self._stop.wait(retry_delay(self.resync_s))
                continue
            except Exception:  # a disk error writing the copy: keep serving, try again
                logger.exception("could not take the routes from %s", self.routes.coordinator)
                self._stop.wait(self.resync_s)
                continue
            if not self._stop.is_set():
                self.routes.wait_for_change(self.snapshot.revision, self.resync_s)
