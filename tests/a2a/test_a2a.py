"""The A2A front through a real sidecar, driven by the ``a2a-sdk`` client from PyPI over
both bindings (gRPC on the sidecar's port, JSON-RPC on its HTTP listener): messages
blocking and streamed, tasks watched again after a reconnect, cancelled, waiting for an
approval that a follow-up message answers, push notifications, another principal's
tasks, and bad input answered with the spec's errors while the sidecar keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
import pytest
from a2a.client import A2AClientError
from a2a.types import a2a_pb2
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format

from agentsidecar.errors import error_details
from sidecar.testing import ServerProcess
from tests.support.a2a import (
    ALICE,
    ALICE_SECRET,
    BOB,
    a2a_client,
    collect,
    public_card,
    user_message,
)
from tests.support.otlp import OtlpReceiver
from tests.support.runs import receiver, signed_correctly
from tests.support.stack import eventually

BINDINGS = ["GRPC", "JSONRPC"]
S = a2a_pb2.TaskState


@pytest.fixture
async def card(stack: dict[str, Any]) -> a2a_pb2.AgentCard:
    side: ServerProcess = stack["sidecar"]
    return await public_card("http://" + side.announced("a2a http on "))


def _final(events: list[a2a_pb2.StreamResponse]) -> a2a_pb2.TaskStatusUpdateEvent:
    updates = [e.status_update for e in events if e.HasField("status_update")]
    return updates[-1]


def _text(parts: Any) -> str:
    return "".join(p.text for p in parts)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_blocking_message_answers_with_the_completed_task(
    card: a2a_pb2.AgentCard, binding: str
) -> None:
    async with a2a_client(card, binding, ALICE, streaming=False) as client:
        (response,) = await collect(client.send_message(user_message("three slow reads please")))
        task = response.task
        assert task.status.state == S.TASK_STATE_COMPLETED
        assert task.id and task.context_id
        (answer,) = task.artifacts
        assert _text(answer.parts).endswith("all three were read")
        assert task.metadata["toolCalls"] == 3
        assert task.history[0].parts[0].text == "three slow reads please"
        # The same context goes on: the session remembers, and the task is found again.
        again = user_message("two reads", context_id=task.context_id)
        (second,) = await collect(client.send_message(again))
        assert second.task.context_id == task.context_id
        assert second.task.status.state == S.TASK_STATE_COMPLETED
        found = await client.get_task(a2a_pb2.GetTaskRequest(id=task.id))
        assert found.status.state == S.TASK_STATE_COMPLETED and found.artifacts == task.artifacts
        listed = await client.list_tasks(
            a2a_pb2.ListTasksRequest(context_id=task.context_id, include_artifacts=True)
        )
        assert [t.id for t in listed.tasks] == [second.task.id, task.id]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_tasks_span_names_the_operation_that_started_it(
    card: a2a_pb2.AgentCard, binding: str, stack: dict[str, Any]
) -> None:
    async with a2a_client(card, binding, ALICE, streaming=False) as client:
        (response,) = await collect(client.send_message(user_message("two reads")))
    traces: OtlpReceiver = stack["receiver"]

    def spans() -> list[Any]:
        return [
            s
            for s in traces.spans()
            if s.name.startswith("invoke_agent")
            and s.attributes.get("agent_sidecar.run_id") == response.task.id
        ]

    async def exported() -> bool:
        return bool(spans())

    await eventually(exported, timeout=20)
    assert [s.attributes["rpc.method"] for s in spans()] == ["SendMessage"]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_tasks_history_keeps_the_callers_message_id(
    card: a2a_pb2.AgentCard, binding: str
) -> None:
    async with a2a_client(card, binding, ALICE, streaming=False) as client:
        sent = user_message("two reads")
        (first,) = await collect(client.send_message(sent))
        follow = user_message("two reads", context_id=first.task.context_id)
        (second,) = await collect(client.send_message(follow))
        found = await client.get_task(a2a_pb2.GetTaskRequest(id=first.task.id))
    assert [m.message_id for m in first.task.history] == [sent.message.message_id]
    assert [m.message_id for m in found.history] == [sent.message.message_id]
    assert [m.message_id for m in second.task.history] == [follow.message.message_id]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_streamed_message_streams_tool_progress_and_the_answer(
    card: a2a_pb2.AgentCard, binding: str
) -> None:
    async with a2a_client(card, binding, ALICE) as client:
        events = await collect(client.send_message(user_message("three slow reads please")))
    assert events[0].HasField("task")
    task_id = events[0].task.id
    statuses = [e.status_update for e in events if e.HasField("status_update")]
    assert {s.task_id for s in statuses} == {task_id}
    progress = [
        p.data.struct_value for s in statuses for p in s.status.message.parts if p.HasField("data")
    ]
    kinds = [next(iter(d.fields)) for d in progress]
    assert kinds.count("toolCall") == 3 and kinds.count("toolResult") == 3
    artifacts = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert artifacts[-1].last_chunk and not artifacts[-1].append
    assert _text(artifacts[-1].artifact.parts).endswith("all three were read")
    assert _final(events).status.state == S.TASK_STATE_COMPLETED


def _tool_progress(event: a2a_pb2.StreamResponse) -> bool:
    return any(p.HasField("data") for p in event.status_update.status.message.parts)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_background_task_is_watched_again_after_a_reconnect(
    card: a2a_pb2.AgentCard, binding: str
) -> None:
    async with a2a_client(card, binding, ALICE, polling=True, streaming=False) as client:
        (started,) = await collect(client.send_message(user_message("hang please")))
    task = started.task
    assert task.status.state in (S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING)
    request = a2a_pb2.SubscribeToTaskRequest(id=task.id)
    async with (
        a2a_client(card, binding, ALICE) as client,
        a2a_client(card, binding, ALICE) as other,
    ):
        # A first watcher leaves after the task as it was then.
        async with contextlib.aclosing(client.subscribe(request)) as first:
            assert (await anext(first)).task.id == task.id
        # A second one gets the task as it is now, then its events to the end.
        async with contextlib.aclosing(client.subscribe(request)) as second:
            snapshot = await anext(second)
            assert snapshot.task.id == task.id
            assert snapshot.task.status.state in (S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING)
            await other.cancel_task(a2a_pb2.CancelTaskRequest(id=task.id))
            rest = [event async for event in second]
        assert _final(rest).status.state == S.TASK_STATE_CANCELED
        # A finished task has nothing more to watch: GetTask has it.
        with pytest.raises(UnsupportedOperationError):
            await collect(client.subscribe(request))
        done = await client.get_task(a2a_pb2.GetTaskRequest(id=task.id))
        assert done.status.state == S.TASK_STATE_CANCELED


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_stops_a_task_and_a_finished_task_is_not_cancelable(
    card: a2a_pb2.AgentCard, binding: str
) -> None:
    async with a2a_client(card, binding, ALICE, polling=True, streaming=False) as client:
        (started,) = await collect(client.send_message(user_message("hang please")))
        task_id = started.task.id
    async with a2a_client(card, binding, ALICE) as client:
        cancelled = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task_id))
        assert cancelled.status.state == S.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task_id))


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_approval_is_input_required_and_a_follow_up_message_answers_it(
    card: a2a_pb2.AgentCard, binding: str
) -> None:
    async with a2a_client(card, binding, ALICE, streaming=False) as client:
        (waiting,) = await collect(
            client.send_message(user_message("Please refund order 20250101"))
        )
        task = waiting.task
        assert task.status.state == S.TASK_STATE_INPUT_REQUIRED
        (asked,) = [p for p in task.status.message.parts if p.HasField("data")]
        (call,) = asked.data.struct_value["approvalRequired"]
        assert call["toolName"] == "refund"
        # A message that neither approves nor denies is refused; the task still waits.
        vague = user_message("maybe later", task_id=task.id, context_id=task.context_id)
        with pytest.raises(InvalidParamsError):
            await collect(client.send_message(vague))
        answer = user_message("approve", task_id=task.id, context_id=task.context_id)
        (done,) = await collect(client.send_message(answer))
        assert done.task.id == task.id
        assert done.task.status.state == S.TASK_STATE_COMPLETED
        assert _text(done.task.artifacts[0].parts).endswith("refund handled")
        # A finished task takes no more messages.
        with pytest.raises(UnsupportedOperationError):
            await collect(client.send_message(answer))


async def test_a_push_notification_is_the_a2a_task_with_its_token_and_signed(
    card: a2a_pb2.AgentCard,
) -> None:
    async with receiver() as hook, a2a_client(card, "GRPC", ALICE, streaming=False) as client:
        request = user_message("two reads")
        push = request.configuration.task_push_notification_config
        push.url, push.token = hook.url, "alice-check-42"
        push.authentication.scheme, push.authentication.credentials = "Bearer", "hook-secret"
        (response,) = await collect(client.send_message(request))
        task_id = response.task.id
        (delivery,) = await hook.wait(1)
        configs = await client.list_task_push_notification_configs(
            a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        refused = []
        for field, value in (("token", "two\nlines"), ("token", "x" * 513)):
            bad = user_message("two reads")
            bad_push = bad.configuration.task_push_notification_config
            bad_push.url = hook.url
            setattr(bad_push, field, value)
            refused.append(bad)
        for scheme, credentials in (("Two words", "x"), ("Bearer", "a\nb"), ("Bearer", "")):
            bad_auth = user_message("two reads")
            creds = bad_auth.configuration.task_push_notification_config
            creds.url = hook.url
            creds.authentication.scheme, creds.authentication.credentials = scheme, credentials
            refused.append(bad_auth)
        plaintext = user_message("two reads")
        off_loopback = plaintext.configuration.task_push_notification_config
        off_loopback.url = "http://hooks.example/a2a"
        off_loopback.authentication.scheme = "Bearer"
        off_loopback.authentication.credentials = "hook-secret"
        refused.append(plaintext)
        for bad in refused:
            with pytest.raises(InvalidParamsError):
                await collect(client.send_message(bad))
    assert signed_correctly(delivery, ALICE_SECRET)
    assert delivery.headers["x-a2a-notification-token"] == "alice-check-42"
    # The credentials were kept sealed with the run, and presented to the receiver.
    assert delivery.headers["authorization"] == "Bearer hook-secret"
    # The body is what A2A's JSON binding writes: a StreamResponse holding the task.
    pushed = json_format.Parse(delivery.body, a2a_pb2.StreamResponse())
    assert pushed.task.id == task_id and pushed.task.context_id == response.task.context_id
    assert pushed.task.status.state == S.TASK_STATE_COMPLETED
    assert _text(pushed.task.artifacts[0].parts) == _text(response.task.artifacts[0].parts)
    assert [(c.url, c.token) for c in configs.configs] == [(hook.url, "alice-check-42")]
    assert not configs.configs[0].HasField("authentication")  # never shown back
    assert len(hook.deliveries) == 1  # the refused messages started nothing


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_push_config_is_set_dropped_delivered_at_the_end_and_kept_after_it(
    card: a2a_pb2.AgentCard, binding: str
) -> None:
    def config(task_id: str, url: str, token: str = "") -> a2a_pb2.TaskPushNotificationConfig:
        return a2a_pb2.TaskPushNotificationConfig(task_id=task_id, url=url, token=token)

    async with receiver() as hook, a2a_client(card, binding, ALICE, streaming=False) as client:
        (waiting,) = await collect(
            client.send_message(user_message("Please refund order 20250101"))
        )
        task = waiting.task
        assert task.status.state == S.TASK_STATE_INPUT_REQUIRED
        first = await client.create_task_push_notification_config(config(task.id, hook.url, "a"))
        again = await client.create_task_push_notification_config(config(task.id, hook.url, "a"))
        with pytest.raises(UnsupportedOperationError):  # one config per task
            await client.create_task_push_notification_config(
                config(task.id, hook.url + "/other", "b")
            )
        await client.delete_task_push_notification_config(
            a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=first.id)
        )
        emptied = await client.list_task_push_notification_configs(
            a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        await client.create_task_push_notification_config(config(task.id, hook.url, "final"))
        async with a2a_client(card, binding, BOB, streaming=False) as bob:
            with pytest.raises(TaskNotFoundError):
                await bob.create_task_push_notification_config(config(task.id, hook.url))
        answer = user_message("approve", task_id=task.id, context_id=task.context_id)
        (done,) = await collect(client.send_message(answer))
        (delivery,) = await hook.wait(1)
        with pytest.raises(UnsupportedOperationError):  # still one config per task
            await client.create_task_push_notification_config(
                config(task.id, hook.url + "/other", "x")
            )
        # A finished task keeps its configs as the spec says: deleted (once its delivery
        # is recorded; twice is no error), then named again under the caller's id, and
        # shown; it delivers nothing more, as the task has no more updates.
        gone = a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=task.id)
        for _ in range(100):
            try:
                await client.delete_task_push_notification_config(gone)
                break
            except UnsupportedOperationError:  # the delivery's outcome not yet stored
                await asyncio.sleep(0.1)
        await client.delete_task_push_notification_config(gone)
        late = config(task.id, hook.url, "late")
        late.id = "my-late-config"
        named = await client.create_task_push_notification_config(late)
        shown = await client.get_task_push_notification_config(
            a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=task.id, id="my-late-config")
        )
        with pytest.raises(TaskNotFoundError):
            await client.get_task_push_notification_config(
                a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=task.id, id=task.id)
            )
        listed = await client.list_task_push_notification_configs(
            a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        with pytest.raises(TaskNotFoundError):  # the task must exist
            await client.delete_task_push_notification_config(
                a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id="no-such-task", id="x")
            )
    assert (named.id, named.url, named.token) == ("my-late-config", hook.url, "late")
    assert shown == named and list(listed.configs) == [named]
    assert len(hook.deliveries) == 1
    assert first == again and (first.id, first.url, first.token) == (task.id, hook.url, "a")
    assert list(emptied.configs) == []
    assert done.task.status.state == S.TASK_STATE_COMPLETED
    assert signed_correctly(delivery, ALICE_SECRET)
    assert delivery.headers["x-a2a-notification-token"] == "final"
    pushed = json_format.Parse(delivery.body, a2a_pb2.StreamResponse())
    assert pushed.task.id == task.id and pushed.task.status.state == S.TASK_STATE_COMPLETED


@pytest.mark.parametrize("binding", BINDINGS)
async def test_another_principals_task_does_not_exist_for_the_caller(
    card: a2a_pb2.AgentCard, binding: str
) -> None:
    async with a2a_client(card, binding, ALICE, streaming=False) as alice:
        (mine,) = await collect(alice.send_message(user_message("two reads")))
    task = mine.task
    async with a2a_client(card, binding, BOB, streaming=False) as bob:
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(a2a_pb2.GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await bob.cancel_task(a2a_pb2.CancelTaskRequest(id=task.id))
        follow = user_message("approve", task_id=task.id)
        with pytest.raises(TaskNotFoundError):
            await collect(bob.send_message(follow))
        # Bob's message in Alice's context is Bob's own context of the same name.
        (his,) = await collect(
            bob.send_message(user_message("two reads", context_id=task.context_id))
        )
        listed = await bob.list_tasks(a2a_pb2.ListTasksRequest(context_id=task.context_id))
        assert [t.id for t in listed.tasks] == [his.task.id]
        # Without a context: every context of the caller's, and only the caller's.
        everywhere = await bob.list_tasks(a2a_pb2.ListTasksRequest(page_size=100))
        assert his.task.id in [t.id for t in everywhere.tasks]
        assert task.id not in [t.id for t in everywhere.tasks]
    async with a2a_client(card, binding, ALICE, streaming=False) as alice:
        (other,) = await collect(alice.send_message(user_message("two reads")))
        first = await alice.list_tasks(a2a_pb2.ListTasksRequest(page_size=1))
        second = await alice.list_tasks(
            a2a_pb2.ListTasksRequest(page_size=1, page_token=first.next_page_token)
        )
    # Newest first, across contexts, each task with its own context.
    assert [t.id for t in first.tasks] == [other.task.id]
    assert first.tasks[0].context_id == other.task.context_id != task.context_id
    assert second.tasks[0].id != other.task.id and second.tasks[0].context_id


@pytest.mark.parametrize("binding", BINDINGS)
async def test_bad_input_is_answered_with_the_specs_errors_and_the_sidecar_keeps_serving(
    card: a2a_pb2.AgentCard, binding: str
) -> None:
    async with a2a_client(card, binding, ALICE, streaming=False) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(a2a_pb2.GetTaskRequest(id="no-such-task"))
        empty = a2a_pb2.SendMessageRequest(
            message=a2a_pb2.Message(message_id="m1", role=a2a_pb2.ROLE_USER)
        )
        with pytest.raises(InvalidParamsError):
            await collect(client.send_message(empty))
        image = user_message("look")
        image.message.parts.append(a2a_pb2.Part(raw=b"\x89PNG", media_type="image/png"))
        with pytest.raises(ContentTypeNotSupportedError):
            await collect(client.send_message(image))
        unknown = user_message("two reads")
        unknown.message.metadata["skill"] = "no-such-skill"
        with pytest.raises(InvalidParamsError):
            await collect(client.send_message(unknown))
        bad_context = user_message("two reads", context_id="not a valid id!")
        with pytest.raises(InvalidParamsError):
            await collect(client.send_message(bad_context))
        with pytest.raises(InvalidParamsError):
            await client.list_tasks(a2a_pb2.ListTasksRequest(page_token="not-a-token"))
        (ok,) = await collect(client.send_message(user_message("two reads")))
        assert ok.task.status.state == S.TASK_STATE_COMPLETED


async def test_a_caller_without_credentials_is_refused_on_both_bindings(
    card: a2a_pb2.AgentCard, stack: dict[str, Any]
) -> None:
    async with a2a_client(card, "GRPC", None, streaming=False) as client:
        with pytest.raises(A2AClientError) as refused:
            await client.get_task(a2a_pb2.GetTaskRequest(id="x"))
    cause = refused.value.__cause__
    assert isinstance(cause, grpc.aio.AioRpcError)
    details = error_details(cause)
    assert (details.code, details.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    async with a2a_client(card, "JSONRPC", "wrong-token", streaming=False) as client:
        with pytest.raises(A2AClientError) as http:
            await client.get_task(a2a_pb2.GetTaskRequest(id="x"))
    assert "401" in str(http.value)
