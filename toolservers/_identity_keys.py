"""The sidecar's identity keys, fetched from its ``IdentityKeysService`` and kept fresh
(``--identity-keys-from``), by the rule every SDK follows (docs/tool-servers.md, "The
signed assertion"): plaintext to this machine only, TLS to anywhere else; fetched in the
background from the start (retried after 1 s, doubling to 30 s), again every ``max_age``,
and soon after an assertion names a key it does not know; the keys held are kept when a
refresh fails."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from pathlib import Path
from typing import Any

import grpc

from agentsidecar.addresses import is_local_target
from agentsidecar.v1 import identity_pb2, identity_pb2_grpc

logger = logging.getLogger("toolservers")

_DEFAULT_MAX_AGE = 300.0  # when the answer names none


class FetchedKeys:
    """The keys a sidecar serves, as the verifier reads them: ``keys`` (None until the
    first answer) and ``version`` (bumped when they change).

    Args:
        target: The sidecar's gRPC address (``HOST:PORT``, ``unix:PATH``).
        ca_file: The CA bundle TLS is verified against (given, TLS is used on this machine
            too); None: the system's roots, and plaintext to this machine.
        first_retry, last_retry: The wait after a failed fetch, doubling from the first.
        soonest: The least time between two fetches that unknown keys ask for.

    Raises:
        ValueError: ``ca_file`` cannot be read.
    """

    def __init__(
        self,
        target: str,
        ca_file: str | None = None,
        *,
        first_retry: float = 1.0,
        last_retry: float = 30.0,
        soonest: float = 10.0,
    ) -> None:
        self.target = target
        self.keys: dict[str | None, Any] | None = None
        self.version = 0
        self._credentials: grpc.ChannelCredentials | None = None
        if ca_file is not None or not is_local_target(target):
            roots = None
            if ca_file is not None:
                try:
                    roots = Path(ca_file).read_bytes()
                except OSError as exc:
                    raise ValueError(f"cannot read {ca_file}: {exc.strerror}") from None
            self._credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        self._first_retry, self._last_retry, self._soonest = first_retry, last_retry, soonest
        self._wake = asyncio.Event()
        self._asked = -math.inf
        self._jwks = ""

    def want_refresh(self) -> None:
        """Fetch soon (an assertion named a key not held), at most once per ``soonest``."""
        now = time.monotonic()
        if now - self._asked >= self._soonest:
            self._asked = now
            self._wake.set()

    async def run(self) -> None:
        """Fetch until cancelled."""
        if self._credentials is None:
            channel = grpc.aio.insecure_channel(self.target)
        else:
            channel = grpc.aio.secure_channel(self.target, self._credentials)
        stub = identity_pb2_grpc.IdentityKeysServiceStub(channel)
        retry = self._first_retry
        try:
            while True:
                try:
                    wait = await self._fetch(stub)
                    retry = self._first_retry
                except (grpc.aio.AioRpcError, ValueError) as exc:
                    why = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
                    held = "keeping the keys held" if self.keys is not None else "none held yet"
                    logger.warning(
                        "identity keys not fetched from %s (%s); %s, trying again in %.0f s",
                        self.target,
                        why,
                        held,
                        retry,
                    )
                    wait, retry = retry, min(retry * 2, self._last_retry)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
        finally:
            await channel.close()

    async def _fetch(self, stub: identity_pb2_grpc.IdentityKeysServiceStub) -> float:
        from toolservers._identity import parse_keys

        answer: identity_pb2.GetIdentityKeysResponse = await stub.GetIdentityKeys(
            identity_pb2.GetIdentityKeysRequest(), timeout=10
        )
        if answer.jwks != self._jwks:
            self.keys = parse_keys(answer.jwks.encode(), f"the keys {self.target} serves")
            self._jwks = answer.jwks
            self.version += 1
            logger.info("identity keys fetched from %s: %d keys", self.target, len(self.keys))
        max_age = answer.max_age.ToTimedelta().total_seconds()
        return max_age if max_age > 0 else _DEFAULT_MAX_AGE
