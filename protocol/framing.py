"""Frame codec: size-prefixed Kafka frames out of a byte stream (sans-IO, h11-style).

Theory of operation. The shell feeds whatever the socket gave it to
:meth:`FrameDecoder.receive_data` and then calls :meth:`FrameDecoder.next_frame` until it
returns :data:`NEED_DATA`. Each frame comes back as a ``memoryview``: a slice of the received chunk itself whenever the frame lies
inside one chunk, which is the common case for a socket read of 64 KiB, so forwarding a
frame costs no copy. A frame that straddles chunks is gathered once.

The decoder holds at most one incomplete frame: the size prefix is checked against
``max_frame_size`` (Kafka's ``socket.request.max.bytes``, 100 MiB by default) as soon as
its four bytes arrive, so an announced 2 GiB frame fails before a byte of it is buffered.
Frames are returned whole, size prefix included: a forwarder sends them on as they are and
reads the body at ``frame[4:]``.
What the caller has fed but not yet taken is :attr:`FrameDecoder.buffered`; the shell
stops reading while that is above its own bound (backpressure).

After ``receive_data(b"")`` (end of stream) the remaining complete frames are still
returned; then :data:`EOF`, or :class:`~protocol.errors.Truncated` when the peer closed
in the middle of a frame.
"""

from __future__ import annotations

import struct
from collections import deque
from enum import Enum
from typing import Final

from protocol.errors import FrameTooLarge, NegativeFrameSize, Truncated

_SIZE = struct.Struct(">i")

#: Kafka's default ``socket.request.max.bytes``.
DEFAULT_MAX_FRAME_SIZE: Final = 100 * 1024 * 1024


class Sentinel(Enum):
    """Values :meth:`FrameDecoder.next_frame` returns when it has no frame."""

    NEED_DATA = "need data"
    EOF = "eof"


NEED_DATA: Final = Sentinel.NEED_DATA
EOF: Final = Sentinel.EOF


def size_prefix(size: int) -> bytes:
    """The int32 size that precedes a frame body of ``size`` bytes."""
    return size.to_bytes(4, "big", signed=True)


def encode_frame(body: bytes | bytearray | memoryview) -> bytes:
    """A whole frame: size prefix then ``body``."""
    return size_prefix(len(body)) + bytes(body)


class FrameDecoder:
    """Splits a byte stream into frame bodies; see the module docstring."""

    __slots__ = ("_chunks", "_eof", "_head", "_need", "buffered", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 0:
            raise ValueError("max_frame_size must be >= 0")
        self.max_frame_size = max_frame_size
        self._chunks: deque[memoryview] = deque()
        #: Bytes fed and not yet returned as frames.
        self.buffered = 0
        self._head = 0  # offset of unread data in _chunks[0]
        self._need = -1  # whole size of the frame being gathered, -1 while unknown
        self._eof = False

    @property
    def pending(self) -> int:
        """Bytes the incomplete frame being gathered will hold: its whole size once its
        size prefix is in, else what is buffered (a memory budget reserves this)."""
        return self._need if self._need >= 0 else self.buffered

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes from the peer; ``b""`` means the peer closed its side."""
        if self._eof and data:
            raise RuntimeError("receive_data after end of stream")
        if not data:
            self._eof = True
            return
        # Frames are views into what was fed: keep an immutable copy of a mutable buffer
        # so a caller reusing its bytearray cannot change frames already handed out.
        if not isinstance(data, bytes):
            data = bytes(data)
        self._chunks.append(memoryview(data))
        self.buffered += len(data)

    def next_frame(self) -> memoryview | Sentinel:
        """The next complete frame (size prefix included), :data:`NEED_DATA` or :data:`EOF`.

        The body is ``frame[4:]``; the whole frame is what a forwarder sends on unchanged.
        Raises :class:`FrameTooLarge` or :class:`NegativeFrameSize` for an unacceptable
        size prefix and :class:`Truncated` at end of stream inside a frame; after any of
        these the stream cannot be resynchronised and the connection must close.
        """
        need = self._need
        if need < 0:
            if self.buffered < 4:
                return self._starved()
            first = self._chunks[0]
            if self._head + 4 <= len(first):
                size: int = _SIZE.unpack_from(first, self._head)[0]
            else:
                size = int.from_bytes(self._peek4(), "big", signed=True)
            if size < 0:
                raise NegativeFrameSize(size)
            if size > self.max_frame_size:
                raise FrameTooLarge(size, self.max_frame_size)
            need = self._need = size + 4
        if self.buffered < need:
            return self._starved()
        self._need = -1
        self.buffered -= need
        first = self._chunks[0]
        head = self._head
        end = head + need
        if end < len(first):  # within the first chunk: a view of it (most frames)
            self._head = end
            return first[head:end]
        if end == len(first):
            self._chunks.popleft()
            self._head = 0
            return first[head:end]
        return self._gather(need)

    def _peek4(self) -> bytes:
        """The next 4 bytes when the first chunk holds fewer: at least 4 are buffered, so
        the chunks that follow hold the rest."""
        gathered = bytearray(self._chunks[0][self._head :])
        following = 1
        while len(gathered) < 4:
            gathered += self._chunks[following][: 4 - len(gathered)]
            following += 1
        return bytes(gathered)

    def _starved(self) -> Sentinel:
        if not self._eof:
            return NEED_DATA
        if self.buffered or self._need >= 0:
            raise Truncated(
                f"peer closed inside a frame ({self.buffered} byte(s) of an incomplete frame)"
            )
        return EOF

    def _gather(self, n: int) -> memoryview:
        """Remove and return the next ``n`` bytes, which span chunks (``buffered`` already
        counts them out)."""
        out = bytearray(n)
        filled = 0
        while filled < n:
            first = self._chunks[0]
            part = first[self._head : self._head + (n - filled)]
            out[filled : filled + len(part)] = part
            filled += len(part)
            if self._head + len(part) == len(first):
                self._chunks.popleft()
                self._head = 0
            else:
                self._head += len(part)
        return memoryview(out)
