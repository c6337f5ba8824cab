"""A TCP proxy that a test can cut and restore, to make a database (or any server)
unreachable for a process without stopping it:

    with TcpProxy("127.0.0.1", 5432) as proxy:
        url = f"postgresql+asyncpg://postgres@127.0.0.1:{proxy.port}/db"
        proxy.cut()       # open connections reset, new ones reset at once
        proxy.cut(hang=True)  # or: nothing passes either way, nothing is closed
        proxy.restore()   # new connections pass again (and held bytes flow on)

It runs its own event loop in a thread, so it keeps forwarding while the test's
thread or event loop waits on something else (a subprocess starting through it).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, Self

_CHUNK = 65_536


class TcpProxy:
    """Forwards 127.0.0.1:`port` (a free one) to `host`:`upstream_port`."""

    def __init__(self, host: str, upstream_port: int) -> None:
        self._upstream = (host, upstream_port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._writers: set[asyncio.StreamWriter] = set()
        self._cut = False
        self._flowing = asyncio.Event()  # set while bytes may pass (not cut with hang)
        self._server: asyncio.Server = self._call(self._listen())
        self.port: int = self._server.sockets[0].getsockname()[1]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    async def _listen(self) -> asyncio.Server:
        self._flowing.set()
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    def cut(self, *, hang: bool = False) -> None:
        """Make the upstream unreachable: by default every open connection is reset and
        new ones are reset at once (a server gone, a refused connection); with `hang`,
        connections stay open but no byte passes either way (a network partition:
        only timeouts notice)."""
        self._call(self._cut_now(hang))

    def restore(self) -> None:
        """Let connections through again."""
        self._call(self._restore_now())

    def close(self) -> None:
        self._call(self._close_now())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _cut_now(self, hang: bool) -> None:
        self._cut = True
        if hang:
            self._flowing.clear()
            return
        self._flowing.set()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _restore_now(self) -> None:
        self._cut = False
        self._flowing.set()

    async def _close_now(self) -> None:
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._flowing.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut and self._flowing.is_set():
            writer.transport.abort()
            return
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                self._writers.discard(end)
                end.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(_CHUNK):
                await self._flowing.wait()
                if writer.transport.is_closing():
                    break
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
