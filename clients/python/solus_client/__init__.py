"""Batching client of Solus, the Bloom-filter deduplication service.

``SolusClient`` (threads, ``concurrent.futures``) and ``AsyncSolusClient`` (asyncio) take one
entity at a time, coalesce them into requests per deduper, bound the requests in flight, and
retry ``UNAVAILABLE``/``RESOURCE_EXHAUSTED`` with backoff and the same ``request_id``.
"""
from ._common import SolusError
from .client import SolusClient
from .aio import AsyncSolusClient

__all__ = ["SolusClient", "AsyncSolusClient", "SolusError"]
