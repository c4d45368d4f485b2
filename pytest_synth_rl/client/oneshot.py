"""Sending a backend call outside a job: the client, the retry loop and the clock, without a job.

The environment-key upload and the task app verification are one or three requests each, made
before any job exists. They go through the same :func:`.retry.send` loop as job calls, on a client
the caller passes or one made here for the duration of the operation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TypeVar

import httpx

from pytest_synth_rl.client.calls import Call
from pytest_synth_rl.client.retry import RetryPolicy, async_send, send
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.taskapp.tls import shared_ssl_context

__all__ = ["DEFAULT_ONESHOT_TIMEOUT", "async_client_for", "async_run", "client_for", "run"]

T = TypeVar("T")

#: Seconds for one request when the client is made here.
DEFAULT_ONESHOT_TIMEOUT = 30.0


@contextmanager
def client_for(
    http_client: httpx.Client | None, transport: httpx.BaseTransport | None, timeout: float
) -> Iterator[httpx.Client]:
    """*http_client* as is (left open), or a new client on *transport*, closed afterwards."""
    if http_client is not None:
        yield http_client
        return
    with httpx.Client(transport=transport, timeout=timeout, verify=shared_ssl_context()) as client:
        yield client


@asynccontextmanager
async def async_client_for(
    http_client: httpx.AsyncClient | None, transport: httpx.AsyncBaseTransport | None, timeout: float
) -> AsyncIterator[httpx.AsyncClient]:
    """:func:`client_for` for ``httpx.AsyncClient``."""
    if http_client is not None:
        yield http_client
        return
    async with httpx.AsyncClient(transport=transport, timeout=timeout, verify=shared_ssl_context()) as client:
        yield client


def run(client: httpx.Client, call: Call[T], *, retry: RetryPolicy, clock: Clock) -> T:
    """Send *call* (retrying per *retry*) and read its answer, or raise its typed error."""
    sent = send(client, call.build(client), policy=retry, clock=clock, error_cls=call.error_cls)
    return call.outcome(sent)


async def async_run(client: httpx.AsyncClient, call: Call[T], *, retry: RetryPolicy, clock: Clock) -> T:
    """:func:`run` over ``httpx.AsyncClient``."""
    sent = await async_send(client, call.build(client), policy=retry, clock=clock, error_cls=call.error_cls)
    return call.outcome(sent)
