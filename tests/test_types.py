"""The shared vocabulary: plain enums that mirror the proto enums."""

from __future__ import annotations

import enum

import pytest

from agentsidecar.v1 import agent_pb2
from sidecar.types import (
    BudgetPolicy,
    BudgetStage,
    CallbackStatus,
    RunPath,
    RunState,
    StageKind,
    StopReason,
    ToolAvailability,
    ToolCallStatus,
)


@pytest.mark.parametrize(
    ("plain", "proto", "prefix"),
    [
        (StopReason, agent_pb2.StopReason, "STOP_REASON_"),
        (ToolCallStatus, agent_pb2.ToolCallStatus, "TOOL_CALL_STATUS_"),
        (StageKind, agent_pb2.StageKind, "STAGE_KIND_"),
        (ToolAvailability, agent_pb2.ToolAvailability, "TOOL_AVAILABILITY_"),
        (BudgetStage, agent_pb2.BudgetStage, "BUDGET_STAGE_"),
        (BudgetPolicy, agent_pb2.BudgetPolicy, "BUDGET_POLICY_"),
        (RunState, agent_pb2.RunState, "RUN_STATE_"),
        (RunPath, agent_pb2.RunPath, "RUN_PATH_"),
    ],
)
def test_plain_enums_mirror_the_proto_enums_value_for_value(
    plain: type[enum.IntEnum], proto: object, prefix: str
) -> None:
    names = {
        name.removeprefix(prefix): number
        for name, number in proto.items()  # type: ignore[attr-defined]
        if not name.endswith("_UNSPECIFIED")
    }
    assert {m.name: m.value for m in plain} == names


def test_callback_statuses_mirror_the_proto_with_none_for_unspecified() -> None:
    names = {
        "NONE" if name.endswith("_UNSPECIFIED") else name.removeprefix("CALLBACK_STATUS_"): n
        for name, n in agent_pb2.CallbackStatus.items()
    }
    assert {m.name: m.value for m in CallbackStatus} == names


def test_a_runs_final_state_follows_its_stop_reason_as_a2a_reads_it() -> None:
    final = {reason: RunState.of(reason) for reason in StopReason}
    assert final.pop(StopReason.ANSWERED) is RunState.COMPLETED
    assert final.pop(StopReason.BUDGET_ANSWERED) is RunState.COMPLETED
    assert final.pop(StopReason.CANCELLED) is RunState.CANCELED
    assert final.pop(StopReason.REFUSED) is RunState.REJECTED
    assert set(final.values()) == {RunState.FAILED}  # every other end is a failure
    assert all(state.finished for state in (RunState.of(r) for r in StopReason))
    assert not any(
        s.finished for s in (RunState.SUBMITTED, RunState.WORKING, RunState.INPUT_REQUIRED)
    )
