"""Completion callbacks: a finished background run's final state, POSTed to the URL it
named, signed, retried with backoff, only where the configuration allows
(:mod:`sidecar.security.webhooks` says how).

Delivery is at least once: the run's owner delivers right after the run finishes and keeps
the run while it retries (a long backoff gives it back, due later, to whichever replica
claims it then); a replica that stops mid-delivery leaves it to the next. A receiver tells
deliveries of one run apart by ``webhook-id`` (the run id). A 2xx answer delivers; 408, 429,
5xx, a timeout or a connection error is retried; any other answer (a redirect among them)
or an address the configuration refuses ends it as failed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import aiohttp

from sidecar.agent.runs.codec import RunCodec
from sidecar.config import CallbackConfig
from sidecar.errors import CallbackNotAllowed
from sidecar.security.audit import AuditLog
from sidecar.security.webhooks import (
    AddressRefused,
    VettedResolver,
    check_allowed,
    open_authorization,
    sign,
)
from sidecar.sessions.runs import RunStore
from sidecar.types import CallbackStatus, RunRecord

__all__ = ["CallbackBody", "Callbacks"]

CallbackBody = Callable[[RunRecord, str], bytes]
"""A finished run's callback body (the run, its session id as its caller names it)."""

log = logging.getLogger(__name__)

_HOLD = 30.0  # seconds of backoff a replica waits out itself; longer, it gives the run back
_RETRYABLE = frozenset({408, 429})


class _Refused(Exception):
    """The delivery cannot succeed by trying again."""


class Callbacks:
    """Delivers completion callbacks.

    Args:
        settings: ``background.callbacks``.
        store: Where the runs are (their delivery state).
        owner: This replica's name in the store.
        codec: Encodes a run's final state.
        secrets: A principal's signing key by its name; None: it has none (now).
        audit: The audit record.
        shapes: Bodies of callbacks shaped by a front, by ``RunRecord.callback_shape``
            (read at delivery: a front registers its shape when it starts).
    """

    def __init__(
        self,
        settings: CallbackConfig,
        *,
        store: RunStore,
        owner: str,
        codec: RunCodec,
        secrets: Callable[[str], bytes | None],
        audit: AuditLog,
        shapes: Mapping[str, CallbackBody] | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._owner = owner
        self._codec = codec
        self._secrets = secrets
        self._audit = audit
        self._shapes = shapes if shapes is not None else {}
        self._http: aiohttp.ClientSession | None = None
        self._rng = random.Random()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            connector = aiohttp.TCPConnector(
                resolver=VettedResolver(allow_private=self._settings.allow_private_networks),
                use_dns_cache=False,  # every connection checks what the name resolves to now
            )
            self._http = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def deliver(self, run: RunRecord, session_id: str) -> float | None:
        """Deliver ``run``'s final state (it is this replica's, finished, callback pending),
        retrying until it is delivered, fails for good, or its backoff is long enough to
        give it back to the store.

        Returns:
            When the delivery given back is due (wall-clock seconds); None when it ended.
        """
        attempts = run.callback_attempts
        if not run.callback_shape:
            body = self._codec.callback_body(run, session_id)
        elif (shape := self._shapes.get(run.callback_shape)) is not None:
            body = shape(run, session_id)
        else:  # started by a front this replica does not serve
            await self._done(
                run,
                CallbackStatus.FAILED,
                attempts + 1,
                f"this replica cannot shape a {run.callback_shape!r} callback",
            )
            return None
        policy = self._settings.retry
        while True:
            attempts += 1
            try:
                status = await self._post(run, body)
                if 200 <= status < 300:
                    await self._done(run, CallbackStatus.DELIVERED, attempts, f"{status}")
                    return None
                if status < 500 and status not in _RETRYABLE:
                    raise _Refused(f"the URL answered {status}" + _redirect(status))
                detail = f"the URL answered {status}"
            except _Refused as exc:
                await self._done(run, CallbackStatus.FAILED, attempts, str(exc))
                return None
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                detail = type(exc).__name__
            if attempts >= policy.max_attempts:
                await self._done(run, CallbackStatus.FAILED, attempts, detail)
                return None
            wait = policy.backoff(attempts, self._rng)
            log.info(
                "callback of run %s: attempt %d failed (%s); again in %.1fs",
                run.run_id,
                attempts,
                detail,
                wait,
            )
            if wait > _HOLD:
                due = time.time() + wait
                await self._store.callback_done(
                    run.run_id,
                    self._owner,
                    status=CallbackStatus.PENDING,
                    attempts=attempts,
                    not_before=due,
                )
                return due
            await asyncio.sleep(wait)

    async def _post(self, run: RunRecord, body: bytes) -> int:
        secret = self._secrets(run.principal)
        if secret is None:
            raise _Refused("its principal has no callback secret configured any more")
        try:
            # The configuration of this process decides, whatever allowed it at the start;
            # an IP address in the URL is checked here (a name, for each connection).
            check_allowed(run.callback_url, self._settings)
        except CallbackNotAllowed as exc:
            raise _Refused(exc.message) from None
        timestamp = int(time.time())
        headers = {
            "content-type": "application/json",
            "webhook-id": run.run_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(secret, run.run_id, timestamp, body),
        }
        if run.callback_token:
            headers["x-a2a-notification-token"] = run.callback_token
        if run.callback_auth:
            try:
                headers["authorization"] = open_authorization(secret, run.run_id, run.callback_auth)
            except ValueError as exc:
                raise _Refused(f"its credentials cannot be opened: {exc}") from None
        try:
            async with self._session().post(
                run.callback_url,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self._settings.timeout),
            ) as response:
                return response.status
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, AddressRefused) or isinstance(
                exc.__cause__, AddressRefused
            ):
                raise _Refused(str(exc.os_error)) from None
            raise

    async def _done(
        self, run: RunRecord, status: CallbackStatus, attempts: int, detail: str
    ) -> None:
        await self._store.callback_done(run.run_id, self._owner, status=status, attempts=attempts)
        delivered = status is CallbackStatus.DELIVERED
        if not delivered:
            log.warning(
                "callback of run %s failed after %d attempt(s): %s", run.run_id, attempts, detail
            )
        if self._audit.enabled:
            self._audit.record(
                "callback_delivered" if delivered else "callback_failed",
                run.principal,
                run_id=run.run_id,
                host=urlsplit(run.callback_url).hostname,
                attempts=attempts,
                detail=detail,
            )


def _redirect(status: int) -> str:
    return " (redirects are not followed)" if 300 <= status < 400 else ""
