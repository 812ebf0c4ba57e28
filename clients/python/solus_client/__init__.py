"""Batching client of Solus, the Bloom-filter deduplication service.

``SolusClient`` (threads, ``concurrent.futures``) and ``AsyncSolusClient`` (asyncio) take one
entity at a time, coalesce them into requests per deduper, bound the requests in flight, and
retry what the server marks transient (``google.rpc.RetryInfo``) or a failed transport, with
backoff and the same ``request_id``.
"""
from ._errors import CallbackWaitError, ClientClosedError, ForkedClientError, SolusError
from .client import SolusClient, SolusExitWarning
from .aio import AsyncSolusClient

__all__ = ["SolusClient", "AsyncSolusClient", "SolusError", "ClientClosedError", "CallbackWaitError",
           "ForkedClientError", "SolusExitWarning"]
