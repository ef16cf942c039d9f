"""The topics of a Metadata answer, read for the embedded coordinator (sans-IO).

Theory of operation. The coordinator needs each topic's name, ID and partition count, every
``sidecar.coordinator.metadata.refresh.ms``, of every topic when a member subscribes by
regex. Reading 5,000 topics into 5,000 fresh :class:`~coordinator.topics.TopicInfo` objects
(and their UUIDs) each time cost little CPU but a great deal of garbage collection: those
objects live through the refresh, so the collector promotes them to its oldest generation,
where they die at the next refresh, and full collections walking them paused every
connection of the sidecar for tens of milliseconds.

A :class:`TopicReader` remembers each topic by its bytes in the answer (bytes are not
tracked by the collector): a topic whose bytes are as last time is the object it was last
time, and only a topic that changed (a new topic, a partition added, a leader moved) is read
again, with a compiled :class:`~protocol.pick.Picker` over that one topic.
"""

from __future__ import annotations

import uuid
from typing import Final

from coordinator.topics import TopicInfo
from protocol.pick import EXTENT, Picker
from protocol.scan import TopArray
from protocol.spec import MessageSpec

#: The namespace of topic IDs made up from names, where a Metadata version carries none
#: (before v10); they are stored in group records, so it never changes.
NAMESPACE: Final = uuid.UUID("6b9f3c3e-5c1a-4a56-9a0f-2f0e4b4d8c11")


class TopicReader:
    """Reads the topics of one broker's Metadata answers (see the module docstring)."""

    def __init__(self, response: MessageSpec) -> None:
        self._response = response
        #: Where the topics lie, per version.
        self._layouts: dict[int, TopArray] = {}
        element = response.element("Topics")
        self._extent = Picker(element, {EXTENT: None})
        self._topic = Picker(element, {"ErrorCode": None, "Name": None, "TopicId": None, "Partitions": {}})
        #: The last answer's topics by their bytes (``None``: one that is not listed).
        self._known: dict[bytes, TopicInfo | None] = {}
        #: The last answer read whole: its version, its bytes and its topics.
        self._last: tuple[int, bytes, list[TopicInfo]] | None = None

    def read(self, version: int, body: bytes | memoryview) -> list[TopicInfo]:
        """The topics of a Metadata answer's body (after its header) that have a name and
        no error; IDs made up from names where the version has none."""
        read = self.begin(version, body)
        read.step(read.left)
        return read.finish()

    def begin(self, version: int, body: bytes | memoryview) -> TopicRead:
        """:meth:`read`, a few topics at a time (:meth:`TopicRead.step`), so that a shell
        can serve others in between. An answer that is the last one's, byte for byte (a
        cluster whose topics did not change, asked again), is read at once. Two reads may
        overlap: the memory of the last answer is replaced whole by the read that finishes
        last, and a lost one only costs reading topics again."""
        layout = self._layouts.get(version)
        if layout is None:
            layout = self._layouts[version] = TopArray(self._response, version, "Topics")
        return TopicRead(self, version, layout, bytes(body))

    def _read_one(self, version: int, view: memoryview, start: int) -> TopicInfo | None:
        error, name, topic_id, partitions = self._topic.pick(version, view, start)
        if error or name is None:
            return None
        if topic_id.int == 0:
            topic_id = uuid.uuid5(NAMESPACE, name)
        return TopicInfo(name=name, topic_id=topic_id, partitions=len(partitions))


class TopicRead:
    """One Metadata answer's topics, read a few at a time (see :meth:`TopicReader.begin`)."""

    def __init__(self, reader: TopicReader, version: int, layout: TopArray, whole: bytes) -> None:
        self._reader = reader
        self._version = version
        self._layout = layout
        self._whole = whole
        self._view = view = memoryview(whole)
        #: The topics read so far, and the memory of them for the next answer (``None``:
        #: this answer is the last one's, nothing to read, and the memory stays).
        self._found: list[TopicInfo] = []
        self._seen: dict[bytes, TopicInfo | None] | None = {}
        #: The next topic's offset, and how many are still to read.
        self._pos = self.left = 0
        last = reader._last
        if last is not None and last[0] == version and last[1] == whole:
            self._found, self._seen = list(last[2]), None
        else:
            _, self.left, self._pos = layout.open(view)

    def step(self, topics: int) -> bool:
        """Read up to ``topics`` more topics; True once all are read."""
        seen = self._seen
        if seen is None:
            return True
        reader, view, version, pos = self._reader, self._view, self._version, self._pos
        known, found = reader._known, self._found
        extent = reader._extent.pick
        count = min(topics, self.left)
        for _ in range(count):
            ((start, end),) = extent(version, view, pos)
            raw = bytes(view[start:end])
            info = known[raw] if raw in known else reader._read_one(version, view, start)
            seen[raw] = info
            if info is not None:
                found.append(info)
            pos = end
        self._pos = pos
        self.left -= count
        if not self.left:
            self._layout.close(view, pos)  # what follows the topics is walked, as a client would
        return not self.left

    def finish(self) -> list[TopicInfo]:
        """The topics read (every one must have been), remembered for the next answer."""
        assert not self.left, "finish before every topic was read"
        if self._seen is not None:
            self._reader._known = self._seen
            self._reader._last = (self._version, self._whole, list(self._found))
        return self._found
