"""The blocking JobService client: :class:`AsyncJobsClient`'s methods, waited for.

There is one implementation, the asyncio client. A :class:`JobsClient` owns an event
loop running in a daemon thread of its own, and its asyncio client lives on that
loop (a grpc.aio channel is bound to the loop it was made on). Each method runs the
asyncio client's method there and waits for its answer; an iterator (``watch``,
``stream_job_updates``, ``stream_job_changes``, ``iter_jobs``) pulls one item at a
time. So requests, deadlines, retries, errors and the watch's fallback to polling
are the asyncio client's, and an error is the very exception it raised. A callback
(``on_chunk``) runs in the caller's thread, as a blocking client's should, and may
call the client. Ctrl-C in the caller cancels the call it interrupts; ``close()`` (or the
client being garbage-collected, or the interpreter exiting) closes the channel and
ends the thread.

The client is safe to share between threads, and works in a thread that runs an
event loop of its own (it blocks that thread, as any blocking call does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from queue import Empty, SimpleQueue
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, get_args, get_type_hints

import grpc

from san_jobs.client._async_client import AsyncJobsClient
from san_jobs.client._channel import ChannelSettings, ClientBase, aio_channel
from san_jobs.client._transport import BlockingChannelStub
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

CANCEL_GRACE = 5.0
"""Seconds an interrupted call may take to finish cancelling before the caller goes on."""
WAKE_EVERY = 0.2
"""Seconds between two looks for a signal while a call waits."""
CLOSE_GRACE = 5.0
"""Seconds close() waits for the channel to close and the loop's thread to end."""

_DONE = object()
Inbox = SimpleQueue[Callable[[], None] | None]


class _Loop:
    """An event loop in a daemon thread, and the way into it and back out."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.closed = False
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._serve, name="san-jobs-client", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            _finish(self.loop)

    def _in_loop_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def run(self, coro: Coroutine[Any, Any, T], inbox: Inbox | None = None) -> T:
        """Run ``coro`` on the loop and wait for it; meanwhile run here what it puts
        in ``inbox`` (callbacks). Interrupted here (KeyboardInterrupt), it is cancelled."""
        problem = self._unusable()
        if problem is not None:
            coro.close()
            raise problem
        finished = threading.Event()
        future = asyncio.run_coroutine_threadsafe(_tracked(coro, finished), self.loop)
        inbox = SimpleQueue() if inbox is None else inbox
        future.add_done_callback(lambda _: inbox.put(None))
        try:
            while (callback := _take(inbox)) is not None:
                callback()
            return future.result()
        except BaseException:
            if not future.done():  # interrupted in this thread: stop the call
                future.cancel()
                finished.wait(CANCEL_GRACE)
            raise

    def _unusable(self) -> Exception | None:
        if self.closed:
            return ValueError("Cannot invoke RPC on closed channel!")  # as grpc says it
        if os.getpid() != self._pid:
            return RuntimeError("a JobsClient cannot be used across fork(): make one in the child")
        if self._in_loop_thread():
            return RuntimeError("a JobsClient cannot be called from its own event loop")
        return None

    def in_caller(self, callback: Callable[..., Any], inbox: Inbox) -> Callable[..., Any]:
        """``callback`` for the loop's side: each call is run in the thread waiting in
        :meth:`run` (put in its ``inbox``), and awaited."""

        async def relay(*args: Any) -> Any:
            answer: concurrent.futures.Future[Any] = concurrent.futures.Future()

            def call() -> None:
                try:
                    answer.set_result(callback(*args))
                except Exception as error:
                    answer.set_exception(error)

            inbox.put(call)
            return await asyncio.wrap_future(answer)

        return relay

    def iterate(self, items: AsyncIterator[T]) -> Generator[T, None, None]:
        """``items`` one at a time; closing the generator closes them."""
        try:
            while (item := self.run(_next(items))) is not _DONE:
                yield item
        finally:
            self._close_iterator(items)

    def _close_iterator(self, items: AsyncIterator[Any]) -> None:
        aclose = getattr(items, "aclose", None)
        if aclose is None or self.closed or self.loop.is_closed():
            return
        if self._in_loop_thread():  # garbage-collected in the loop's thread
            self.loop.create_task(aclose())
            return
        self.run(aclose())

    def shutdown(self, client: AsyncJobsClient | None) -> None:
        """Close ``client`` on the loop, then stop the loop and end its thread."""
        if self.closed or self.loop.is_closed():
            return
        if self._in_loop_thread():  # garbage-collected in the loop's thread
            self.closed = True
            closing = self.loop.create_task(_close(client))
            closing.add_done_callback(lambda _: self.loop.stop())
            return
        try:
            if client is not None and os.getpid() == self._pid:
                asyncio.run_coroutine_threadsafe(_close(client), self.loop).result(CLOSE_GRACE)
        except Exception:  # a channel that will not close (or too slowly): ended anyway
            pass
        finally:
            self.closed = True
            self.loop.call_soon_threadsafe(self.loop.stop)
            if os.getpid() == self._pid:
                self._thread.join(CLOSE_GRACE)


def _take(inbox: Inbox) -> Callable[[], None] | None:
    """The next item of ``inbox``, waking every WAKE_EVERY seconds: a signal handler
    (Ctrl-C) runs then even where a blocked wait is not interrupted."""
    while True:
        try:
            return inbox.get(timeout=WAKE_EVERY)
        except Empty:
            continue


async def _tracked(coro: Coroutine[Any, Any, T], finished: threading.Event) -> T:
    try:
        return await coro
    finally:
        finished.set()


async def _next(items: AsyncIterator[T]) -> T | Any:
    try:
        return await anext(items)
    except StopAsyncIteration:
        return _DONE


async def _close(client: AsyncJobsClient | None) -> None:
    if client is not None:
        await client.close()


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """What asyncio.run does after its main task: cancel what is left, then close."""
    try:
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


async def _open(settings: ChannelSettings, channel: grpc.Channel | None) -> AsyncJobsClient:
    """The inner asyncio client, made on the loop it will run on."""
    if channel is not None:
        stub = BlockingChannelStub(channel)
        return AsyncJobsClient._over(settings, stub, on_close=stub.close)
    aio = aio_channel(settings)
    return AsyncJobsClient._over(settings, pb_grpc.JobServiceStub(aio), channel=aio)


def _blocking(
    method: Callable[Concatenate[AsyncJobsClient, P], Coroutine[Any, Any, R]],
    *,
    callbacks: tuple[str, ...] = (),
) -> Callable[Concatenate[JobsClient, P], R]:
    """``method`` of the asyncio client as a blocking method; the keyword arguments
    named in ``callbacks`` are called in the caller's thread."""

    def blocking(self: JobsClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        inbox: Inbox | None = SimpleQueue() if callbacks else None
        for name in callbacks:
            given = kwargs.get(name)
            if callable(given) and inbox is not None:
                kwargs[name] = self._loop.in_caller(given, inbox)
        return self._loop.run(method(self._async, *args, **kwargs), inbox)

    return _like(blocking, method, iterating=False)


def _iterating(
    method: Callable[Concatenate[AsyncJobsClient, P], AsyncIterator[R]],
) -> Callable[Concatenate[JobsClient, P], Generator[R, None, None]]:
    """An async-iterator ``method`` of the asyncio client as a generator method."""

    def iterating(
        self: JobsClient, /, *args: P.args, **kwargs: P.kwargs
    ) -> Generator[R, None, None]:
        return self._loop.iterate(method(self._async, *args, **kwargs))

    return _like(iterating, method, iterating=True)


def _like(function: T, method: Callable[..., Any], *, iterating: bool) -> T:
    """``function`` named, documented and annotated as ``method`` (for help(),
    inspect and get_type_hints), its return made blocking."""
    hints = get_type_hints(method)
    returns = hints.get("return", Any)
    if iterating:  # AsyncGenerator[Job, None] / AsyncIterator[Job] -> Generator[Job, None, None]
        item = (get_args(returns) or (Any,))[0]
        returns = Generator[item, None, None]  # type: ignore[valid-type]
    signature = inspect.signature(method, eval_str=True)
    target: Any = function
    target.__name__ = method.__name__
    target.__qualname__ = f"JobsClient.{method.__name__}"
    target.__doc__ = method.__doc__
    target.__signature__ = signature.replace(return_annotation=returns)
    target.__annotations__ = {**hints, "return": returns}
    return function


class JobsClient(ClientBase[grpc.Channel]):
    """A blocking client of JobService: every method of
    :class:`~san_jobs.client.AsyncJobsClient`, waited for (the same code runs).

    Every method raises a :class:`~san_jobs.client.JobsError` subclass on failure. Unary
    calls get ``timeout`` seconds unless told otherwise. Use as a context manager, or
    call :meth:`close`. ``channel``, when given, is a blocking ``grpc.Channel``.

    >>> with JobsClient("127.0.0.1:50051") as client:  # doctest: +SKIP
    ...     job = client.enqueue("scrap-1", CardAnalysisInput(text="...")).job
    ...     done = client.wait(job.id, timeout=60)
    ...     print(done.status)
    JOB_STATUS_COMPLETED
    """

    _loop: _Loop
    _async: AsyncJobsClient

    def _connect(self, channel: grpc.Channel | None) -> None:
        if isinstance(channel, grpc.aio.Channel):
            raise TypeError("JobsClient takes a blocking grpc.Channel, not a grpc.aio one")
        self._start(_open(self.settings, channel))

    @classmethod
    def _over(
        cls,
        settings: ChannelSettings,
        stub: object,
        *,
        on_close: Callable[[], object] | None = None,
    ) -> JobsClient:
        """A client calling ``stub`` (see ``_transport``): one over the testing fake."""

        async def make() -> AsyncJobsClient:
            return AsyncJobsClient._over(settings, stub, on_close=on_close)

        client = cls.__new__(cls)
        client.settings = settings
        client._start(make())
        return client

    def _start(self, make: Coroutine[Any, Any, AsyncJobsClient]) -> None:
        loop = _Loop()
        try:
            self._async = loop.run(make)
        except BaseException:
            loop.shutdown(None)
            raise
        self._loop = loop
        # Not a method of self: the client can be collected, and is closed then.
        self._finalizer = weakref.finalize(self, loop.shutdown, self._async)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel (calls in flight are cancelled) and end the client's thread."""
        self._finalizer()

    enqueue = _blocking(AsyncJobsClient.enqueue)
    enqueue_many = _blocking(AsyncJobsClient.enqueue_many, callbacks=("on_chunk",))
    get_job = _blocking(AsyncJobsClient.get_job)
    stream_job_updates = _iterating(AsyncJobsClient.stream_job_updates)
    stream_job_changes = _iterating(AsyncJobsClient.stream_job_changes)
    retry_failed = _blocking(AsyncJobsClient.retry_failed)
    list_jobs = _blocking(AsyncJobsClient.list_jobs)
    iter_jobs = _iterating(AsyncJobsClient.iter_jobs)
    cancel_job = _blocking(AsyncJobsClient.cancel_job)
    get_job_stats = _blocking(AsyncJobsClient.get_job_stats)
    get_usage = _blocking(AsyncJobsClient.get_usage)
    prune_jobs = _blocking(AsyncJobsClient.prune_jobs)
    list_failure_groups = _blocking(AsyncJobsClient.list_failure_groups)
    create_schedule = _blocking(AsyncJobsClient.create_schedule)
    get_schedule = _blocking(AsyncJobsClient.get_schedule)
    list_schedules = _blocking(AsyncJobsClient.list_schedules)
    iter_schedules = _iterating(AsyncJobsClient.iter_schedules)
    delete_schedule = _blocking(AsyncJobsClient.delete_schedule)
    pause_schedule = _blocking(AsyncJobsClient.pause_schedule)
    resume_schedule = _blocking(AsyncJobsClient.resume_schedule)
    watch = _iterating(AsyncJobsClient.watch)
    wait = _blocking(AsyncJobsClient.wait)
