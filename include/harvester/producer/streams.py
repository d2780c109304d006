"""Overlap I/O with work: iterate a generator in a thread, a bounded number of items ahead.

The planner reads its input cursor this way and the producer claims packages this way: the
server prepares the next batch while this process handles the current one (socket waits release
the GIL). The queue is bounded, so memory does not grow with the input.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")


def prefetch(items: Iterator[T], ahead: int = 2) -> Iterator[T]:
    """Yield ``items`` in order, produced by a helper thread at most ``ahead`` items in advance.

    An exception in the producer is raised here; closing this generator early stops the thread.
    """
    # an item travels boxed in a 1-tuple (so any value may be an item), an error as itself, None ends
    buffer: queue.Queue[tuple[T] | BaseException | None] = queue.Queue(maxsize=max(1, ahead))
    stop = threading.Event()

    def put(item: tuple[T] | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                buffer.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item,)):
                    return
            put(None)
        except BaseException as error:  # handed to the consumer, which raises it
            put(error)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while (entry := buffer.get()) is not None:
            if isinstance(entry, BaseException):
                raise entry
            yield entry[0]
    finally:
        stop.set()
        thread.join(timeout=30)
