"""Background runs as every front calls them: start, read, list, watch, cancel, decide.

A background run is a turn with no caller waiting: :meth:`BackgroundRuns.start` checks
the request as a run's is checked (the session is the principal's, its profile allowed,
its input sized), bounds it (``background.max_runs`` in all, the principal's
``quota.background_runs``, one unfinished run per session), stores it submitted and hands
it to this replica's :class:`~sidecar.agent.runs.runner.Runner` when it has a slot, else to
whichever replica first has one. Everything else reads the store, so it works on any
replica: a run is the principal's that started it, and no one else's
(:class:`~sidecar.errors.RunNotFound`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from sidecar.agent.admission import Admission
from sidecar.agent.approvals import Approvals, Decision
from sidecar.agent.conversations import Conversations
from sidecar.agent.limits import (
    check_input,
    id_problems,
    input_problems,
    page_size,
    page_size_problems,
    refuse,
    request_id_problems,
)
from sidecar.agent.runs.callbacks import CallbackBody
from sidecar.agent.runs.codec import RunCodec
from sidecar.agent.runs.feed import Feed
from sidecar.agent.runs.runner import CANCELLED_CODE, Runner
from sidecar.agent.snapshot import Snapshot
from sidecar.agent.turns import Turns
from sidecar.config import BackgroundConfig
from sidecar.errors import (
    BackgroundRunsDisabled,
    CallbackNotAllowed,
    FieldViolation,
    InvalidRequest,
    PermissionDenied,
    ProfileRemoved,
    RequestIdReused,
    RunNotFound,
    SessionBusy,
    SessionNotFound,
)
from sidecar.security.audit import AuditLog
from sidecar.security.identity import Principal
from sidecar.security.webhooks import check_allowed, seal_authorization, url_problems
from sidecar.sessions.runs import RunBounds
from sidecar.sessions.store import SessionStore
from sidecar.types import CallbackStatus, RunOutcome, RunRecord, RunState, StopReason

__all__ = ["BackgroundRuns", "RunPage"]

_EVENT_PAGE = 256
"""Stored events a watcher reads at once."""
CANCEL_WAIT = 10.0
"""Seconds CancelRun waits for the run to stop, at most."""


@dataclass(frozen=True, slots=True)
class RunPage:
    """A page of a session's runs, newest first."""

    runs: list[RunRecord]
    next_page_token: str
    """Where the next page starts; empty after the oldest run."""


def _page_token(ordinal: int, key: str) -> str:
    raw = f"{ordinal}:{zlib.crc32(key.encode()):08x}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _page_start(token: str, key: str) -> int | None:
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        ordinal_text, check = raw.split(":")
        ordinal = int(ordinal_text)
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest.field("page_token", "is not a token this sidecar made") from None
    if check != f"{zlib.crc32(key.encode()):08x}" or ordinal < 1:
        raise InvalidRequest.field("page_token", "belongs to another session's listing")
    return ordinal


class BackgroundRuns:
    """Background runs over one session store.

    Args:
        sessions: The session store and its runs.
        conversations: Finds a principal's session.
        turns: Claims and runs turns.
        admission: The drain, and the running turns.
        approvals: The calls waiting for approval.
        snapshot: The configuration applied now.
        settings: ``background``.
        audit: The audit record.
        model_name: The model of profiles with no variants.
    """

    def __init__(
        self,
        *,
        sessions: SessionStore,
        conversations: Conversations,
        turns: Turns,
        admission: Admission,
        approvals: Approvals,
        snapshot: Callable[[], Snapshot],
        settings: BackgroundConfig,
        audit: AuditLog,
        model_name: str,
    ) -> None:
        self._sessions = sessions
        self._store = sessions.runs
        self._conversations = conversations
        self._turns = turns
        self._admission = admission
        self._approvals = approvals
        self._snapshot = snapshot
        self.settings = settings
        self._audit = audit
        self._model_name = model_name
        self.feed = Feed()
        self._runner: Runner | None = None
        self._codec: RunCodec | None = None
        self.callback_shapes: dict[str, CallbackBody] = {}
        """Callback bodies other than the run's final state, by shape: a front that
        starts runs whose callbacks it shapes registers its own (``a2a``)."""

    # -- lifecycle --------------------------------------------------------------------

    async def serve(self, codec: RunCodec) -> None:
        """Run background runs from now on, their events encoded by ``codec`` (the
        front's); first those a process that stopped left behind."""
        if not self.settings.enabled or self._runner is not None:
            return
        self._codec = codec
        self._runner = Runner(
            turns=self._turns,
            model_name=self._model_name,
            sessions=self._sessions,
            admission=self._admission,
            approvals=self._approvals,
            snapshot=self._snapshot,
            settings=self.settings,
            owner=self._store.owner,
            feed=self.feed,
            audit=self._audit,
            codec=codec,
            lease=self._store.lease,
            shapes=self.callback_shapes,
        )
        await self._runner.start()

    def hand_over(self) -> None:
        """The process stops: the runs still going are given up, not finished."""
        if self._runner is not None:
            self._runner.hand_over()

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.close()

    def _check_enabled(self) -> None:
        if not self.settings.enabled:
            raise BackgroundRunsDisabled()

    # -- start ------------------------------------------------------------------------

    async def start(
        self,
        principal: Principal,
        session_id: str,
        user_input: str,
        *,
        structured: bool,
        callback_url: str = "",
        callback_shape: str = "",
        callback_token: str = "",
        callback_authorization: str = "",
        callback_id: str = "",
        request_id: str = "",
        message_id: str = "",
        problems: Sequence[FieldViolation] = (),
    ) -> RunRecord:
        """Start a background run in the principal's session; or, for a ``request_id``
        that started one of the principal's runs already, return that run.

        Args:
            callback_shape: What the callback delivers: empty, the run's final state; or a
                shape a front registered (``callback_shapes``).
            callback_token: Sent back with the callback (``X-A2A-Notification-Token``).
            callback_authorization: An ``Authorization`` header the callback presents to
                its receiver; kept sealed under the principal's callback secret.
            callback_id: The id the caller gave the callback (an A2A push config's).
            request_id: The caller's key for this request (empty: none): a repeat of the
                same request returns the run the first one started.
            message_id: The id the caller gave its input (an A2A ``messageId``).
            problems: What the front found wrong with the request's own fields.

        Raises:
            BackgroundRunsDisabled: ``background.enabled`` is off.
            Draining: the sidecar is shutting down.
            InvalidRequest: naming every invalid field.
            InputTooLarge: the input is longer than the profile allows.
            SessionNotFound, PermissionDenied, ProfileRemoved: as for any run.
            CallbackNotAllowed: the configuration refuses the callback URL, or the
                principal has no callback secret.
            RequestIdReused: ``request_id`` started a run with another request.
            SessionBusy: the session has an unfinished background run.
            RunQueueFull: ``background.max_runs`` runs are unfinished.
            QuotaExceeded: the principal's ``quota.background_runs`` are, or it has used
                up a daily quota.
        """
        self._check_enabled()
        self._admission.refuse_if_draining()
        refuse(
            problems,
            id_problems(session_id, "session_id"),
            input_problems(user_input),
            url_problems(callback_url) if callback_url else (),
            request_id_problems(request_id),
            request_id_problems(message_id, "message.message_id"),
            request_id_problems(callback_id, "callback_id"),
        )
        snapshot = self._snapshot()
        key = principal.key(session_id)
        session = await self._conversations.stored(key, session_id)
        if not principal.may_use(session.profile):
            raise PermissionDenied(principal.name, session.profile)
        profile = snapshot.profiles.get(session.profile)
        if profile is None:
            raise ProfileRemoved(session_id, session.profile)
        check_input(user_input, profile.config.max_input_chars)
        if callback_url:
            self._check_callback(principal, callback_url)
        if principal.quota.daily:  # a run that could not start until midnight is refused
            await self._turns.daily.check(principal)
        now = time.time()
        run_id = uuid.uuid4().hex
        run = RunRecord(
            run_id=run_id,
            session_key=key,
            principal=principal.name,
            input=user_input,
            structured=structured,
            state=RunState.SUBMITTED,
            create_time=now,
            update_time=now,
            callback_url=callback_url,
            callback_shape=callback_shape,
            callback_token=callback_token,
            callback_auth=self._sealed(principal, run_id, callback_authorization),
            callback_status=CallbackStatus.PENDING if callback_url else CallbackStatus.NONE,
            callback_id=callback_id if callback_url else "",
            request_id=request_id,
            message_id=message_id,
        )
        runner = self._runner
        here = runner is not None and runner.reserve()
        try:
            first = await self._store.submit(
                run,
                owner=self._store.owner if here else None,
                bounds=RunBounds(self.settings.max_runs, principal.quota.background_runs),
            )
        except BaseException as exc:
            if here and runner is not None:
                runner.unreserve()
            if isinstance(exc, SessionBusy):
                raise SessionBusy(session_id) from None
            if isinstance(exc, SessionNotFound):
                raise SessionNotFound(session_id) from None
            raise
        if first is not None:  # a repeat: the run the first request started
            if here and runner is not None:
                runner.unreserve()
            same = (first.session_key, first.input, first.structured, first.callback_url)
            if same != (key, user_input, structured, callback_url):
                raise RequestIdReused(request_id, first.run_id)
            return first
        if self._audit.enabled:
            self._audit.record(
                "run_submitted",
                principal.name,
                session_id=session_id,
                run_id=run.run_id,
                profile=profile.name,
                callback=bool(callback_url),
            )
        if runner is not None:
            if here:
                runner.take(run)
            else:
                runner.wake()
        return run

    # -- reads ------------------------------------------------------------------------

    async def get(self, principal: Principal, run_id: str) -> RunRecord:
        """The principal's run.

        Raises:
            InvalidRequest: the id is not one.
            RunNotFound: no such run of the principal's.
        """
        self._check_enabled()
        refuse(id_problems(run_id, "run_id"))
        run = await self._store.get(run_id)
        if run is None or run.principal != principal.name:
            raise RunNotFound(run_id)
        return run

    async def page(
        self, principal: Principal, session_id: str, *, size: int = 0, token: str = ""
    ) -> RunPage:
        """A page of the principal's session's runs, newest first.

        Raises:
            InvalidRequest: a bad id, page size or page token.
            SessionNotFound: no such session.
        """
        self._check_enabled()
        refuse(id_problems(session_id, "session_id"), page_size_problems(size))
        size = page_size(size)
        key = principal.key(session_id)
        before = _page_start(token, key)
        await self._conversations.stored(key, session_id)
        runs = await self._store.page(key, before=before, limit=size + 1)
        following = _page_token(runs[size - 1].ordinal, key) if len(runs) > size else ""
        return RunPage(runs=runs[:size], next_page_token=following)

    async def page_all(self, principal: Principal, *, size: int = 0, token: str = "") -> RunPage:
        """A page of the principal's runs in all its sessions, newest first.

        Raises:
            InvalidRequest: a bad page size or page token.
        """
        self._check_enabled()
        refuse(page_size_problems(size))
        size = page_size(size)
        key = f"principal:{principal.name}"
        before = _page_start(token, key)
        runs = await self._store.page_of(principal.name, before=before, limit=size + 1)
        following = _page_token(runs[size - 1].ordinal, key) if len(runs) > size else ""
        return RunPage(runs=runs[:size], next_page_token=following)

    async def watch(self, principal: Principal, run_id: str, after: int) -> AsyncIterator[bytes]:
        """The run's stored events after sequence ``after``, then each as it is stored,
        until the last one.

        Raises:
            InvalidRequest, RunNotFound: as :meth:`get` (also when the run goes while it
                is watched: its session was deleted, or it expired).
        """
        await self.get(principal, run_id)
        with self.feed.subscribe(run_id) as changed:
            last = after
            while True:
                changed.clear()
                events = await self._store.events(run_id, last, _EVENT_PAGE)
                for sequence, data in events:
                    yield data
                    last = sequence
                if len(events) == _EVENT_PAGE:
                    continue
                # The last event is stored with the final state: once the run has finished
                # and the watcher has its events, the watch is over.
                run = await self._store.get(run_id)
                if run is None:
                    raise RunNotFound(run_id)
                if run.state.finished and run.last_sequence <= last:
                    return
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.poll_interval):
                        await changed.wait()

    async def settled(self, principal: Principal, run_id: str, after: int) -> RunRecord:
        """The run once it has finished, or waits for a decision it asked for after
        sequence ``after`` (what a caller that blocks on a run returns: A2A's
        ``SendMessage``). Read from the stored state as each write is announced; no event
        is parsed.

        Raises:
            InvalidRequest, RunNotFound: as :meth:`get`.
        """
        await self.get(principal, run_id)
        with self.feed.subscribe(run_id) as changed:
            while True:
                changed.clear()
                run = await self._store.get(run_id)
                if run is None:
                    raise RunNotFound(run_id)
                asks = run.state is RunState.INPUT_REQUIRED and bool(run.pending)
                if run.state.finished or (asks and run.last_sequence > after):
                    return await self.get(principal, run_id)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.poll_interval):
                        await changed.wait()

    # -- cancel -----------------------------------------------------------------------

    async def cancel(self, principal: Principal, run_id: str) -> RunRecord:
        """Cancel the principal's run; return it once it stopped (or after
        :data:`CANCEL_WAIT` seconds, when the replica running it has not answered).

        Raises:
            InvalidRequest, RunNotFound: as :meth:`get`.
        """
        run = await self.get(principal, run_id)
        if run.state.finished:
            return run
        if self._audit.enabled:
            self._audit.record(
                "run_cancel_requested",
                principal.name,
                session_id=principal.shown(run.session_key),
                run_id=run_id,
            )
        runner = self._runner
        if runner is not None and runner.cancel(run_id):
            await runner.wait(run_id, CANCEL_WAIT)
        elif not await self._cancel_queued(run_id):
            await self._store.request_cancel(run_id)
            if runner is not None and runner.cancel(run_id):  # taken up here meanwhile
                await runner.wait(run_id, CANCEL_WAIT)
            else:
                await self._finished(run_id, CANCEL_WAIT)
        return await self.get(principal, run_id)

    async def set_callback(
        self,
        principal: Principal,
        run_id: str,
        url: str,
        *,
        shape: str = "",
        token: str = "",
        authorization: str = "",
        callback_id: str = "",
        after_end: bool = False,
    ) -> bool:
        """Name (``url``) or drop (empty) the principal's unfinished run's completion
        callback, under the rules of a callback named at the start.

        Args:
            callback_id: The id the caller gives the callback (an A2A push config's).
            after_end: A finished run's callback may be named or dropped too, unless it
                is being delivered: one named then has nothing to deliver (A2A's push
                configs, which a task keeps whatever its state).

        Returns:
            False when the run has finished (without ``after_end``, or while its
            callback is being delivered), or names another callback.

        Raises:
            InvalidRequest, RunNotFound: as :meth:`get`.
            CallbackNotAllowed: as :meth:`start`.
        """
        run = await self.get(principal, run_id)
        if url:
            refuse(url_problems(url), request_id_problems(callback_id, "callback_id"))
            self._check_callback(principal, url)
        # The runner learns first: a run that finishes meanwhile then either finds the
        # callback in the store, or the store refuses it (and the runner forgets it).
        auth = self._sealed(principal, run_id, authorization) if url else b""
        runner = self._runner
        if runner is not None:
            runner.note_callback(run_id, url, shape, token, auth)
        if not await self._store.set_callback(
            run_id, url, shape, token, auth, callback_id=callback_id, after_end=after_end
        ):
            if runner is not None:
                runner.note_callback(
                    run_id,
                    run.callback_url,
                    run.callback_shape,
                    run.callback_token,
                    run.callback_auth,
                )
            return False
        if self._audit.enabled:
            self._audit.record(
                "run_callback_set" if url else "run_callback_dropped",
                principal.name,
                run_id=run_id,
                host=urlsplit(url).hostname if url else None,
            )
        return True

    def _check_callback(self, principal: Principal, url: str) -> None:
        """Raises CallbackNotAllowed: the configuration refuses ``url``, or the principal
        has no secret to sign its callbacks with."""
        check_allowed(url, self.settings.callbacks)
        if principal.name not in self._snapshot().callback_secrets:
            raise CallbackNotAllowed(
                "no callback secret is configured for this principal (auth.principals[]"
                ".callback_secret_env, or background.callbacks.secret_env without "
                "principals), so its callbacks could not be signed"
            )

    def _sealed(self, principal: Principal, run_id: str, authorization: str) -> bytes:
        if not authorization:
            return b""
        secret = self._snapshot().callback_secrets.get(principal.name)
        if secret is None:
            raise CallbackNotAllowed("no callback secret is configured for this principal")
        return seal_authorization(secret, run_id, authorization)

    async def _cancel_queued(self, run_id: str) -> bool:
        """Cancel a run no replica has taken up yet; False when it is not such a run."""
        if self._codec is None:
            return False
        outcome = RunOutcome.failed(
            StopReason.CANCELLED,
            CANCELLED_CODE,
            "the run was cancelled before it started",
            retryable=False,
            total=0.0,
        )
        result = self._codec.result(outcome)
        event = self._codec.finished(run_id, 1, result)
        if not await self._store.cancel_submitted(run_id, result=result, event=event):
            return False
        self.feed.publish(run_id)
        if self._runner is not None:
            self._runner.wake()  # its callback, if it names one
        return True

    async def _finished(self, run_id: str, timeout: float) -> None:
        with contextlib.suppress(TimeoutError), self.feed.subscribe(run_id) as changed:
            async with asyncio.timeout(timeout):
                while True:
                    changed.clear()
                    run = await self._store.get(run_id)
                    if run is None or run.state.finished:
                        return
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.settings.poll_interval):
                            await changed.wait()

    # -- approvals on another replica -------------------------------------------------

    async def decide(self, session_key: str, call_id: str, decision: Decision) -> str | None:
        """Leave ``decision`` for the session's background run waiting for ``call_id`` on
        another replica; return the run's id, or None when no run of the session waits for
        it (a call waiting here is decided here, through ``Approvals``)."""
        if not self.settings.enabled or not self._store.shared:
            return None
        (latest,) = await self._store.page(session_key, before=None, limit=1) or (None,)
        if latest is None or latest.state is not RunState.INPUT_REQUIRED:
            return None
        decided = await self._store.decide(
            latest.run_id, call_id, decision.approved, decision.reason
        )
        return latest.run_id if decided else None
