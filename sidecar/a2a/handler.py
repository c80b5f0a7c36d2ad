"""The A2A operations over the agent: one ``RequestHandler`` behind every binding.

The SDK's gRPC servicer, JSON-RPC dispatcher and HTTP+JSON routes decode a request,
call this handler, and encode what it returns; this module maps each operation onto the
runtime (docs/a2a.md has the table):

- a task is a background run (``agent.runs``): ``SendMessage`` starts one and, unless the
  client asked to return at once (``return_immediately``), waits until it finishes or
  needs input; ``SendStreamingMessage`` and ``SubscribeToTask`` watch its stored events;
  ``GetTask``, ``ListTasks`` and ``CancelTask`` read and cancel runs;
- ``context_id`` is a session of the caller's, created with the skill's profile on first
  use (a message without one gets a new session, whose id the task carries);
- ``INPUT_REQUIRED`` is a call waiting for approval; a message on the task answers it;
- a push notification config is the run's completion callback, shaped as A2A's push
  notification (the task in a ``StreamResponse``, the config's token in
  ``X-A2A-Notification-Token``) and signed as every callback is.

Every call names its principal (the context builders authenticate it), and everything
it may do is what ``AgentService`` lets the same principal do: its sessions, its runs,
its quotas, audited alike.
"""

from __future__ import annotations

import functools
import logging
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler, validate_request_params
from a2a.types import a2a_pb2
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format

from agentsidecar.addresses import is_loopback
from sidecar.a2a.errors import to_a2a
from sidecar.a2a.tasks import EventReader, task_of
from sidecar.agent.agent import Agent
from sidecar.agent.approvals import Decision
from sidecar.config import A2AConfig, A2ASkillConfig
from sidecar.errors import RequestError, RunNotFound, SessionExists, SessionNotFound
from sidecar.security.callers import CallerCheck
from sidecar.security.identity import Principal
from sidecar.types import RunRecord, RunState

__all__ = ["PRINCIPAL", "SHAPE", "TaskHandler", "push_body"]

log = logging.getLogger(__name__)

PRINCIPAL = "agentsidecar.principal"
"""Key of the call's :class:`Principal` in ``ServerCallContext.state``."""
SHAPE = "a2a"
"""The callback shape of runs A2A starts (``RunRecord.callback_shape``)."""
_MAX_TOKEN = 512
_MAX_CREDENTIALS = 4096
_SCHEME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
"""An HTTP authentication scheme (RFC 9110's token)."""


def _config_id(run: RunRecord) -> str:
    """A task's push notification config's id: the one its caller gave, else the task's."""
    return run.callback_id or run.run_id


def push_body(run: RunRecord, context_id: str) -> bytes:
    """A finished task's push notification: the task, in a ``StreamResponse``, as A2A's
    JSON binding writes it."""
    response = a2a_pb2.StreamResponse(task=task_of(run, context_id))
    return orjson.dumps(json_format.MessageToDict(response))


_APPROVE = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})
_DENY = frozenset({"deny", "denied", "no", "n", "reject"})
_TEXT_TYPES = frozenset({"", "text/plain", "text/markdown", "application/json"})

_R = TypeVar("_R")


def _principal(context: ServerCallContext) -> Principal:
    principal = context.state.get(PRINCIPAL)
    if not isinstance(principal, Principal):  # a binding that did not authenticate: a bug
        raise InternalError("the call was not authenticated")
    return principal


def _internal(exc: BaseException) -> InternalError:
    error_id = uuid.uuid4().hex[:16]
    log.error("internal error %s", error_id, exc_info=exc)
    return InternalError(f"internal error {error_id}; the sidecar's log has the details")


def _no_tenant(params: Any) -> None:
    """Tenants are not served (principals separate callers): a request naming one is
    refused rather than served as if it named none."""
    if getattr(params, "tenant", ""):
        raise InvalidParamsError(
            "tenants are not served by this agent: send the request without tenant",
            {"errors": [{"field": "tenant", "message": "must be empty"}]},
        )


def _answers(
    method: Callable[..., Awaitable[_R]],
) -> Callable[..., Awaitable[_R]]:
    """A unary operation whose sidecar errors become A2A errors (a bug, INTERNAL)."""

    @functools.wraps(method)
    async def wrapped(self: TaskHandler, params: Any, context: ServerCallContext) -> _R:
        try:
            _no_tenant(params)
            return await method(self, params, context)
        except A2AError:
            raise
        except RequestError as exc:
            self._refused(context, _OPERATIONS.get(method.__name__, method.__name__), exc)
            raise to_a2a(exc) from None
        except Exception as exc:
            raise _internal(exc) from None

    return wrapped


_OPERATIONS = {
    "on_message_send": "SendMessage",
    "on_message_send_stream": "SendStreamingMessage",
    "on_get_task": "GetTask",
    "on_list_tasks": "ListTasks",
    "on_cancel_task": "CancelTask",
    "on_subscribe_to_task": "SubscribeToTask",
    "on_create_task_push_notification_config": "CreateTaskPushNotificationConfig",
    "on_get_task_push_notification_config": "GetTaskPushNotificationConfig",
    "on_list_task_push_notification_configs": "ListTaskPushNotificationConfigs",
    "on_delete_task_push_notification_config": "DeleteTaskPushNotificationConfig",
    "on_get_extended_agent_card": "GetExtendedAgentCard",
}
"""The A2A operation each of the SDK's handler methods serves (for the audit record)."""


def _streams(
    method: Callable[..., AsyncIterator[Any]],
) -> Callable[..., AsyncGenerator[Any]]:
    """A streaming operation whose sidecar errors become A2A errors."""

    @functools.wraps(method)
    async def wrapped(
        self: TaskHandler, params: Any, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        try:
            _no_tenant(params)
            async for event in method(self, params, context):
                yield event
        except A2AError:
            raise
        except RequestError as exc:
            self._refused(context, _OPERATIONS.get(method.__name__, method.__name__), exc)
            raise to_a2a(exc) from None
        except Exception as exc:
            raise _internal(exc) from None

    return wrapped


def _text(message: a2a_pb2.Message) -> str:
    """The user input a message carries: its text parts, and its data parts as JSON,
    joined by blank lines.

    Raises:
        InvalidParamsError: it carries nothing.
        ContentTypeNotSupportedError: a file part (raw bytes or a URL).
    """
    pieces = []
    for i, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if part.media_type not in _TEXT_TYPES and kind != "data":
            raise ContentTypeNotSupportedError(
                f"message.parts[{i}]: {part.media_type!r} is not accepted; send text/plain "
                "text or application/json data"
            )
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            from google.protobuf import json_format

            pieces.append(orjson.dumps(json_format.MessageToDict(part.data)).decode())
        else:
            raise ContentTypeNotSupportedError(
                f"message.parts[{i}]: files (raw bytes or a URL) are not accepted; send "
                "text or data"
            )
    text = "\n\n".join(p for p in pieces if p)
    if not text.strip():
        raise InvalidParamsError(
            "the message carries no text",
            {"errors": [{"field": "message.parts", "message": "must carry text or data"}]},
        )
    return text


def _decision(message: a2a_pb2.Message) -> tuple[Decision, str]:
    """The approval a follow-up message gives: ``(decision, call_id or "")``.

    Raises:
        InvalidParamsError: the message neither approves nor denies.
    """
    from google.protobuf import json_format

    for part in message.parts:
        if part.WhichOneof("content") == "data":
            value = json_format.MessageToDict(part.data)
            if isinstance(value, dict) and isinstance(value.get("decision"), str):
                word = value["decision"].strip().lower()
                reason = value.get("reason")
                call_id = value.get("callId", value.get("call_id"))  # the old spelling too
                if word in _APPROVE | _DENY:
                    return (
                        Decision(word in _APPROVE, reason if isinstance(reason, str) else ""),
                        call_id if isinstance(call_id, str) else "",
                    )
        if part.WhichOneof("content") == "text":
            word, _, reason = part.text.strip().partition(" ")
            word = word.strip(".,:;!").lower()
            if word in _APPROVE | _DENY:
                return Decision(word in _APPROVE, reason.strip()), ""
    raise InvalidParamsError(
        "the task waits for an approval: answer 'approve' or 'deny' (a text part), or "
        'a data part {"decision": "approve"|"deny", "callId": ..., "reason": ...}',
        {"errors": [{"field": "message.parts", "message": "must approve or deny"}]},
    )


class TaskHandler(RequestHandler):
    """A2A's operations over an :class:`Agent`'s background runs.

    Args:
        agent: The agent (its sessions, runs and approvals).
        settings: ``a2a`` of the configuration.
        card: The agent card a principal may see (the extended card).
        push: Whether completion callbacks can be delivered at all (some host allowed).
        callers: Records a principal's refusals, as every front does.
    """

    def __init__(
        self,
        agent: Agent,
        settings: A2AConfig,
        *,
        card: Callable[[Principal], a2a_pb2.AgentCard],
        push: bool,
        callers: CallerCheck,
    ) -> None:
        self._callers = callers
        self._agent = agent
        self._runs = agent.runs
        self._settings = settings
        self._skills = {s.skill_id: s for s in settings.skills}
        self._card = card
        self._push = push

    def _refused(self, context: ServerCallContext, operation: str, exc: RequestError) -> None:
        principal = context.state.get(PRINCIPAL)
        if isinstance(principal, Principal):
            self._callers.refused(principal, operation, exc)

    # -- messages ---------------------------------------------------------------------

    def _skill(self, params: a2a_pb2.SendMessageRequest) -> A2ASkillConfig:
        for metadata in (params.message.metadata, params.metadata):
            if "skill" in metadata:
                name = metadata["skill"]
                skill = self._skills.get(name) if isinstance(name, str) else None
                if skill is None:
                    raise InvalidParamsError(
                        f"no skill {name!r}; the agent card lists the skills",
                        {"errors": [{"field": "metadata.skill", "message": "unknown skill"}]},
                    )
                return skill
        return self._settings.skills[0]

    def _callback(self, params: a2a_pb2.SendMessageRequest) -> tuple[str, str, str]:
        """The push notification config's URL, token and authorization; empty when there
        is none."""
        if not params.configuration.HasField("task_push_notification_config"):
            return "", "", ""
        push = params.configuration.task_push_notification_config
        return self._push_config(push, "configuration.task_push_notification_config.")

    def _push_config(
        self, push: a2a_pb2.TaskPushNotificationConfig, prefix: str
    ) -> tuple[str, str, str]:
        """A push notification config's URL, token and ``Authorization`` header, checked
        (``prefix``: where the config is in the request, for the errors' field names)."""
        if not self._push:
            raise PushNotificationNotSupportedError(
                "push notifications are off: background.callbacks.allowed_hosts is empty"
            )
        if len(push.token) > _MAX_TOKEN or not all(" " < c < "\x7f" for c in push.token):
            raise InvalidParamsError(
                f"the token is sent back as a header: at most {_MAX_TOKEN} visible ASCII "
                "characters",
                {"errors": [{"field": f"{prefix}token", "message": "not a header value"}]},
            )
        authorization = ""
        if push.HasField("authentication"):
            auth = push.authentication
            if (
                not _SCHEME.fullmatch(auth.scheme)
                or not auth.credentials
                or len(auth.credentials) > _MAX_CREDENTIALS
                or not all(" " <= c < "\x7f" for c in auth.credentials)
            ):
                raise InvalidParamsError(
                    "authentication is sent as the notification's Authorization header: a "
                    f"scheme (an HTTP token) and credentials (at most {_MAX_CREDENTIALS} "
                    "printable ASCII characters)",
                    {
                        "errors": [
                            {"field": f"{prefix}authentication", "message": "not a header value"}
                        ]
                    },
                )
            url = urlsplit(push.url)
            if url.scheme != "https" and not is_loopback(url.hostname or ""):
                # As for the sidecar's own tokens: no credentials in plaintext off loopback.
                raise InvalidParamsError(
                    "authentication credentials would travel in plaintext: an http URL "
                    "takes them only to loopback; use https",
                    {"errors": [{"field": f"{prefix}url", "message": "must be https"}]},
                )
            authorization = f"{auth.scheme} {auth.credentials}"
        return push.url, push.token, authorization

    async def _start(
        self, principal: Principal, params: a2a_pb2.SendMessageRequest, *, structured: bool
    ) -> tuple[RunRecord, str]:
        message = params.message
        text = _text(message)
        skill = self._skill(params)
        callback, token, authorization = self._callback(params)
        shape = SHAPE if callback else ""
        context_id = message.context_id
        if not context_id:
            session = await self._agent.create_session(principal, skill.profile, "", {})
            context_id = session.session_id
        start = functools.partial(
            self._runs.start,
            principal,
            context_id,
            text,
            structured=structured,
            callback_url=callback,
            callback_shape=shape,
            callback_token=token,
            callback_authorization=authorization,
            callback_id=params.configuration.task_push_notification_config.id,
            message_id=message.message_id,
        )
        try:
            run = await start()
        except SessionNotFound:
            # The context's first message: its session, under the caller's name for it.
            try:
                await self._agent.create_session(principal, skill.profile, context_id, {})
            except SessionExists:
                pass  # another message of the same context made it meanwhile
            run = await start()
        return run, context_id

    async def _follow_up(
        self, principal: Principal, message: a2a_pb2.Message
    ) -> tuple[RunRecord, str]:
        """A message on an existing task: the answer to its approval."""
        try:
            run = await self._runs.get(principal, message.task_id)
        except RunNotFound:
            raise TaskNotFoundError(f"task {message.task_id} not found") from None
        context_id = principal.shown(run.session_key)
        if message.context_id and message.context_id != context_id:
            raise InvalidParamsError(
                "the message's context_id is not its task's",
                {"errors": [{"field": "message.context_id", "message": "not the task's"}]},
            )
        if run.state.finished:
            raise UnsupportedOperationError(
                f"task {run.run_id} is {run.state.name.lower()}: a finished task takes no "
                "more messages; send one without task_id to start another in the context"
            )
        if run.state is not RunState.INPUT_REQUIRED or not run.pending:
            raise UnsupportedOperationError(
                f"task {run.run_id} is {run.state.name.lower()} and needs no input; watch it "
                "with SubscribeToTask"
            )
        decision, call_id = _decision(message)
        pending = {p.call_id for p in run.pending}
        if not call_id:
            if len(pending) > 1:
                raise InvalidParamsError(
                    "several calls wait for approval: name one with a data part "
                    '{"decision": ..., "callId": ...}',
                    {"errors": [{"field": "message.parts", "message": "name the callId"}]},
                )
            (call_id,) = pending
        await self._agent.decide(principal, context_id, call_id, decision)
        if len(pending) > 1:  # the others still wait
            return await self._runs.get(principal, run.run_id), context_id
        # As it was before the decision: what comes after its last event is the answer.
        run.state = RunState.WORKING
        run.pending = []
        return run, context_id

    async def _settled(self, principal: Principal, run: RunRecord, context_id: str) -> RunRecord:
        """``run`` once it finished or waits for input."""
        if run.state.finished:
            return run
        if run.state is RunState.INPUT_REQUIRED and len(run.pending) > 0:
            return run
        return await self._runs.settled(principal, run.run_id, run.last_sequence)

    @validate_request_params
    @_answers
    async def on_message_send(
        self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext
    ) -> a2a_pb2.Task:
        principal = _principal(context)
        if params.message.task_id:
            run, context_id = await self._follow_up(principal, params.message)
        else:
            run, context_id = await self._start(principal, params, structured=True)
        configuration = params.configuration
        if not configuration.return_immediately:
            run = await self._settled(principal, run, context_id)
        history = configuration.history_length if configuration.HasField("history_length") else None
        return task_of(run, context_id, history_length=history)

    @validate_request_params
    @_streams
    async def on_message_send_stream(
        self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext
    ) -> AsyncIterator[Any]:
        principal = _principal(context)
        if params.message.task_id:
            run, context_id = await self._follow_up(principal, params.message)
        else:
            run, context_id = await self._start(principal, params, structured=False)
        async for event in self._stream(principal, run, context_id):
            yield event

    async def _stream(
        self, principal: Principal, run: RunRecord, context_id: str
    ) -> AsyncIterator[Any]:
        """The task as it is, then its events as they are stored, until it finishes or
        waits for input (the stream of an interrupted task ends there, as A2A says)."""
        yield task_of(run, context_id)
        if run.state.finished or (run.state is RunState.INPUT_REQUIRED and run.pending):
            return
        reader = EventReader(run.run_id, context_id)
        reader.state = run.state
        async for data in self._runs.watch(principal, run.run_id, run.last_sequence):
            for event in reader.read(data):
                yield event
            if reader.finished:
                yield reader.final(await self._runs.get(principal, run.run_id))
                return
            if reader.state is RunState.INPUT_REQUIRED:
                return

    # -- tasks ------------------------------------------------------------------------

    @validate_request_params
    @_answers
    async def on_get_task(
        self, params: a2a_pb2.GetTaskRequest, context: ServerCallContext
    ) -> a2a_pb2.Task:
        principal = _principal(context)
        run = await self._runs.get(principal, params.id)
        history = params.history_length if params.HasField("history_length") else None
        return task_of(run, principal.shown(run.session_key), history_length=history)

    @validate_request_params
    @_answers
    async def on_list_tasks(
        self, params: a2a_pb2.ListTasksRequest, context: ServerCallContext
    ) -> a2a_pb2.ListTasksResponse:
        principal = _principal(context)
        size = params.page_size if params.HasField("page_size") else 0
        if size < 0:
            raise InvalidParamsError(
                "page_size must be positive (or unset for the default)",
                {"errors": [{"field": "page_size", "message": "must be positive"}]},
            )
        if params.context_id:
            try:
                page = await self._runs.page(
                    principal, params.context_id, size=size, token=params.page_token
                )
            except SessionNotFound:  # a context with no tasks yet: an empty page
                return a2a_pb2.ListTasksResponse(page_size=0, total_size=0)
        else:  # every context of the caller's
            page = await self._runs.page_all(principal, size=size, token=params.page_token)
        history = params.history_length if params.HasField("history_length") else None
        after = (
            params.status_timestamp_after.ToNanoseconds() / 1e9
            if params.HasField("status_timestamp_after")
            else None
        )
        tasks = []
        for run in page.runs:
            if params.status and int(run.state) != params.status:
                continue
            if after is not None and run.update_time < after:
                continue
            tasks.append(
                task_of(
                    run,
                    params.context_id or principal.shown(run.session_key),
                    history_length=history,
                    artifacts=params.include_artifacts,
                )
            )
        return a2a_pb2.ListTasksResponse(
            tasks=tasks,
            next_page_token=page.next_page_token,
            page_size=len(tasks),
            total_size=len(tasks),
        )

    @validate_request_params
    @_answers
    async def on_cancel_task(
        self, params: a2a_pb2.CancelTaskRequest, context: ServerCallContext
    ) -> a2a_pb2.Task:
        principal = _principal(context)
        run = await self._runs.get(principal, params.id)
        if run.state.finished:
            raise TaskNotCancelableError(f"task {run.run_id} is {run.state.name.lower()} already")
        run = await self._runs.cancel(principal, params.id)
        return task_of(run, principal.shown(run.session_key))

    @validate_request_params
    @_streams
    async def on_subscribe_to_task(
        self, params: a2a_pb2.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncIterator[Any]:
        principal = _principal(context)
        run = await self._runs.get(principal, params.id)
        if run.state.finished:
            raise UnsupportedOperationError(
                f"task {run.run_id} is {run.state.name.lower()}: GetTask has its result"
            )
        async for event in self._stream(principal, run, principal.shown(run.session_key)):
            yield event

    # -- push notifications: a run's completion callback --------------------------------

    def _config_of(self, run: RunRecord) -> a2a_pb2.TaskPushNotificationConfig:
        return a2a_pb2.TaskPushNotificationConfig(
            id=_config_id(run), task_id=run.run_id, url=run.callback_url, token=run.callback_token
        )

    @validate_request_params
    @_answers
    async def on_create_task_push_notification_config(
        self, params: a2a_pb2.TaskPushNotificationConfig, context: ServerCallContext
    ) -> a2a_pb2.TaskPushNotificationConfig:
        principal = _principal(context)
        url, token, authorization = self._push_config(params, "")
        run = await self._runs.get(principal, params.task_id)
        same = (run.callback_url, run.callback_token, bool(run.callback_auth))
        if same == (url, token, bool(authorization)) and params.id in ("", _config_id(run)):
            return self._config_of(run)  # the one it has: safe to retry
        if run.callback_url:
            raise UnsupportedOperationError(
                "a task has one push notification config; delete it to set another"
            )
        # On a finished task the config is kept and shown, as the spec's Create allows;
        # it has nothing to deliver: a task's end is its last update.
        if not await self._runs.set_callback(
            principal,
            run.run_id,
            url,
            shape=SHAPE,
            token=token,
            authorization=authorization,
            callback_id=params.id,
            after_end=True,
        ):
            raise UnsupportedOperationError(
                f"task {run.run_id} was given another push notification config meanwhile"
            )
        return self._config_of(await self._runs.get(principal, run.run_id))

    @validate_request_params
    @_answers
    async def on_get_task_push_notification_config(
        self, params: a2a_pb2.GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> a2a_pb2.TaskPushNotificationConfig:
        principal = _principal(context)
        run = await self._runs.get(principal, params.task_id)
        if not run.callback_url or (params.id and params.id != _config_id(run)):
            raise TaskNotFoundError(
                f"task {params.task_id} has no push notification config {params.id!r}"
            )
        return self._config_of(run)

    @validate_request_params
    @_answers
    async def on_list_task_push_notification_configs(
        self,
        params: a2a_pb2.ListTaskPushNotificationConfigsRequest,
        context: ServerCallContext,
    ) -> a2a_pb2.ListTaskPushNotificationConfigsResponse:
        principal = _principal(context)
        run = await self._runs.get(principal, params.task_id)
        configs = [self._config_of(run)] if run.callback_url else []
        return a2a_pb2.ListTaskPushNotificationConfigsResponse(configs=configs)

    @validate_request_params
    @_answers
    async def on_delete_task_push_notification_config(
        self,
        params: a2a_pb2.DeleteTaskPushNotificationConfigRequest,
        context: ServerCallContext,
    ) -> None:
        principal = _principal(context)
        run = await self._runs.get(principal, params.task_id)
        if not run.callback_url or (params.id and params.id != _config_id(run)):
            return  # gone already: deleting is idempotent (the task exists)
        if not await self._runs.set_callback(principal, run.run_id, "", after_end=True):
            raise UnsupportedOperationError(
                f"task {run.run_id} has finished and its push notification is being "
                "delivered; delete the config once that is done"
            )

    # -- the card ---------------------------------------------------------------------

    @_answers
    async def on_get_extended_agent_card(  # type: ignore[override]
        self, params: a2a_pb2.GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> a2a_pb2.AgentCard:
        return self._card(_principal(context))
