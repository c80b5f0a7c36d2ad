"""The shared vocabulary: plain enums that mirror the proto enums."""

from __future__ import annotations

import enum

import pytest

from agentsidecar.v1 import agent_pb2
from sidecar.types import (
    BudgetPolicy,
    BudgetStage,
    RunPath,
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
