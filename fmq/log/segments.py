"""The segment set of one log: open, create ahead, prepare in the background, find,
read, truncate and delete segment files.

A next segment that cannot be *created* for want of a descriptor or disk space is not a
lost write: :meth:`SegmentSet.create` raises :class:`~fmq.errors.SegmentUnavailable` with
the set exactly as before, and the next attempt tries again. Any other error creating one
fails the log. Segments at least :data:`PREALLOCATE_AHEAD_MIN` large are zero-filled by a
background thread ahead of the roll, so the append that rolls only renames a file.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections.abc import Callable

from fmq.datadir import TEMP_SUFFIX, format_segment_name
from fmq.errors import LogFailed, OffsetOutOfRange, SegmentUnavailable
from fmq.log.fileio import FileIO
from fmq.log.reader import list_segments
from fmq.log.segment import Segment
from fmq.threadname import name_os_thread

logger = logging.getLogger(__name__)

_ZEROS = bytes(1 << 20)
#: Segments at least this large are prepared (zero-filled) in the background ahead of the
#: roll; smaller ones cost less to create than a thread hand-off.
PREALLOCATE_AHEAD_MIN = 1 << 20


class SegmentSet:
    """The segment files of a log directory, in log order, with the ones created ahead.

    Methods that change the set are called with the log's lock held, except
    :meth:`close`. ``fail`` is told about an error that must fail the whole log."""

    def __init__(self, directory: str, segment_size: int, io: FileIO,
                 fail: Callable[[BaseException], None]) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.io = io
        self._fail = fail
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(TEMP_SUFFIX):  # a segment whose creation never completed
                io.unlink(os.path.join(directory, name))
        self.segments: list[Segment] = [Segment.open(directory, b, io) for b in list_segments(directory)]
        self._bases = [s.base for s in self.segments]
        self._retired: list[Segment] = []
        self._spare: tuple[int, int] | None = None  # (base, fd) of a prepared next segment
        self._spare_thread: threading.Thread | None = None
        #: Segments created ahead for the records being placed, in order.
        self.ahead: list[Segment] = []
        self._refused = 0  # creations refused since a segment last could be created
        self._closed = False

    @property
    def first_base(self) -> int | None:
        return self._bases[0] if self._bases else None

    # ------------------------------------------------------------------ creating

    def add(self, seg: Segment) -> None:
        """Make a created segment the last of the log."""
        self.segments.append(seg)
        self._bases.append(seg.base)

    def create(self, base: int, size: int | None = None) -> Segment:
        """The installed segment at ``base``: the spare prepared in the background, or one
        created here. A missing descriptor or disk space raises SegmentUnavailable and
        leaves the set as it was; any other error fails the log. ``size``: another size
        than the configured one (a follower copies its primary's segments)."""
        size = size or self.segment_size
        try:
            new = self._take_spare(base) if size == self.segment_size else None
            if new is None:
                new = Segment.create(self.directory, base, size, self.io)
        except SegmentUnavailable as exc:
            if not self._refused:  # once per outage: clients retry, each would log it
                logger.warning("%s", exc)
            self._refused += 1
            raise
        except OSError as exc:
            self._fail(exc)
            raise LogFailed(exc) from exc
        if self._refused:
            logger.warning("created segment %s after refusing %d appends without it",
                           new.name, self._refused)
            self._refused = 0
        return new

    def prepare_spare(self, base: int) -> None:
        """Zero-fill the segment at ``base`` in the background."""
        if self.segment_size < PREALLOCATE_AHEAD_MIN or self._closed:
            return
        if self._spare_thread is not None and self._spare_thread.is_alive():
            return

        def work() -> None:
            name_os_thread()
            try:
                fd = Segment.prepare(self.directory, base, self.segment_size, self.io)
            except (OSError, SegmentUnavailable) as exc:  # the roll then creates it itself
                logger.warning("could not prepare the next segment: %s", exc)
                return
            self._spare = (base, fd)

        self._spare_thread = threading.Thread(target=work, name="fmq-segment-prep", daemon=True)
        self._spare_thread.start()

    def _take_spare(self, base: int) -> Segment | None:
        if self._spare_thread is not None:
            self._spare_thread.join()  # at worst as slow as creating it here
            self._spare_thread = None
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        spare_base, fd = spare
        if spare_base != base:  # the layout changed (truncation): throw it away
            self._discard(spare_base, fd)
            return None
        return Segment.install(self.directory, base, self.segment_size, fd, self.io)

    def _discard(self, base: int, fd: int) -> None:
        self.io.close(fd)
        try:
            self.io.unlink(os.path.join(self.directory, format_segment_name(base)) + TEMP_SUFFIX)
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------------ reading

    def segment_for(self, offset: int, first_offset: int) -> Segment:
        """The segment holding ``offset``; ``first_offset`` is where the log starts."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            raise OffsetOutOfRange(
                f"log offset {offset} is before the first segment ({first_offset}); "
                f"it was deleted by retention"
            )
        seg = self.segments[i]
        if offset >= seg.end:
            raise OffsetOutOfRange(f"log offset {offset} lies past the end of the log")
        return seg

    # ------------------------------------------------------------------ removing

    def truncate(self, offset: int) -> list[str]:
        """Zero everything from ``offset`` in its segment and delete later segments (and
        the segment ``offset`` starts, unless it is the first). Returns the deleted names."""
        deleted: list[str] = []
        for seg in list(self.segments):
            if seg.base > offset or (seg.base == offset and seg is not self.segments[0]):
                self.remove(seg)
                deleted.append(seg.name)
            elif offset < seg.end:
                pos = offset - seg.base
                while pos < seg.size:
                    n = min(len(_ZEROS), seg.size - pos)
                    seg.write(pos, memoryview(_ZEROS)[:n])
                    pos += n
                seg.sync()
        if deleted:
            self.io.fsync_dir(self.directory)
        return deleted

    def delete(self, seg: Segment) -> None:
        """Delete a whole segment; its file descriptor stays open until the next deletion
        or close, so a concurrent reader never hits a reused descriptor."""
        for old in self._retired:
            old.close()
        self._retired = []
        self.remove(seg)
        self.io.fsync_dir(self.directory)

    def remove(self, seg: Segment) -> None:
        """Unlink ``seg`` and drop it from the set (its descriptor is kept, see delete)."""
        i = self.segments.index(seg)
        del self.segments[i]
        del self._bases[i]
        self.io.unlink(seg.path)
        self._retired.append(seg)

    def close(self) -> None:
        """Stop preparing, remove the segments created ahead and never used, close all."""
        self._closed = True
        if self._spare_thread is not None:
            self._spare_thread.join()
        if self._spare is not None:
            self._discard(*self._spare)
            self._spare = None
        if self.ahead:  # created for records never placed: empty, no longer needed
            try:
                for seg in self.ahead:
                    seg.close()
                    self.io.unlink(seg.path)
                self.io.fsync_dir(self.directory)
            except OSError as exc:  # recovery deletes empty segments after the end anyway
                logger.warning("could not remove unused segments: %s", exc)
            self.ahead = []
        for seg in self.segments + self._retired:
            seg.close()
