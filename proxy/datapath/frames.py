"""Frames out of a wire's reads, a large frame read straight into its own buffer.

:class:`protocol.framing.FrameDecoder` is fed chunks and hands frames out as views of
them, gathering a frame that straddles chunks into one buffer. For a megabyte Fetch
response or Produce request that gathering copies every byte once more (21.5% of the
sidecar's busy samples consuming through it, ``python -m tests.bench --profile
consume``). :class:`FrameBuffer` is that decoder with one thing added: once a frame's size is known and more than :data:`DIRECT_MIN` bytes of it
are still to come, :meth:`FrameBuffer.direct` returns the unfilled tail of a buffer of
the frame's size, the caller reads into it (``recv_into``), and only the bytes that
arrived before are copied.

With ``lazy``, the buffer of a frame of at least :data:`LAZY_MIN` bytes is an anonymous
memory map, whose pages the kernel provides as they are first written: a frame announced
at 98 MiB and half sent holds 49 MiB of the process's memory, not 98 (``bytearray(n)``
writes every page at once). The client side reads requests this way, so what a slow
client costs is what it sent (:mod:`proxy.datapath.memory`). Smaller frames keep the
``bytearray``: a fresh map costs a page fault per 4 KiB, which for 1 MiB Produce requests
cost more CPU than the whole frame's copy it saves (``python -m tests.bench
produce-b1000-acks1 --baseline``).

Frames come back whole (size prefix included), as ``memoryview``s that stay valid: a
buffer handed to :meth:`FrameBuffer.receive_data` is never written again, and a direct
buffer is never reused. Errors are the protocol's (:class:`~protocol.errors.FrameTooLarge`,
:class:`~protocol.errors.NegativeFrameSize`, :class:`~protocol.errors.Truncated`);
``tests/proxy/test_frames.py`` checks chunkings of a stream against the reference.
"""

from __future__ import annotations

import mmap

from protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, Sentinel

#: A frame with at least this much still to come is read into its own buffer.
DIRECT_MIN = 65536

#: With ``lazy``, a frame of at least this many bytes gets a lazily backed buffer.
LAZY_MIN = 4 << 20


class FrameBuffer(FrameDecoder):
    """A :class:`~protocol.framing.FrameDecoder` that can read a large frame in place."""

    __slots__ = ("_direct", "_filled", "lazy")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, lazy: bool = False) -> None:
        super().__init__(max_frame_size)
        self._direct: bytearray | mmap.mmap | None = None
        self._filled = 0  # bytes of _direct filled
        #: Direct buffers take memory as they are filled, not when made (module docstring).
        self.lazy = lazy

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed a chunk; ``b""`` means the peer closed its side."""
        assert self._direct is None or not data, "a direct read is in progress"
        super().receive_data(data)

    def direct(self) -> memoryview | None:
        """Where to read the rest of the frame being gathered, or ``None`` to read chunks.

        Call after :meth:`next_frame` returned ``NEED_DATA``; report what was read with
        :meth:`filled`.
        """
        if self._direct is None:
            if self._need < 0 or self._need - self.buffered < DIRECT_MIN:
                return None
            lazy = self.lazy and self._need >= LAZY_MIN
            buffer = self._direct = mmap.mmap(-1, self._need) if lazy else bytearray(self._need)
            filled = 0
            while self._chunks:
                part = self._chunks.popleft()[self._head :]
                buffer[filled : filled + len(part)] = part
                filled += len(part)
                self._head = 0
            self._filled = filled
        return memoryview(self._direct)[self._filled :]

    def filled(self, count: int) -> None:
        """``count`` bytes were read into the view :meth:`direct` returned (0: end of stream)."""
        if count == 0:
            self._eof = True
            return
        self._filled += count
        self.buffered += count

    @property
    def gathering(self) -> int:
        """The whole size of the frame being gathered (size prefix included), or -1 while
        between frames or its size is not in yet."""
        return self._need

    def take_partial(self) -> bytes:
        """Remove the bytes of the incomplete frame being gathered: the caller reads and
        forwards the rest of it itself (cut-through); the buffer is then between frames.

        Call when :attr:`gathering` is known and every byte buffered belongs to that
        frame (``buffered < gathering``), whether it was being read in place or not.
        """
        assert 0 <= self.buffered < self._need
        if self._direct is not None:
            head = bytes(memoryview(self._direct)[: self._filled])
            self._direct = None
        else:
            head = b"".join(chunk[self._head :] if i == 0 else chunk for i, chunk in enumerate(self._chunks))
            self._chunks.clear()
            self._head = 0
        self.buffered = 0
        self._need = -1
        return head

    def next_frame(self) -> memoryview | Sentinel:
        """The next complete frame (size prefix included), ``NEED_DATA`` or ``EOF``."""
        if self._direct is None:
            return super().next_frame()
        if self._filled < self._need:
            return self._starved()
        frame = memoryview(self._direct)
        self._direct = None
        self.buffered -= self._need
        self._need = -1
        return frame
