"""Run cost from the price table, and ``agent-sidecar report`` over a generated log."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy
import pytest

from sidecar.agent.prices import PriceTable
from sidecar.catalog import CATALOG, retired_names
from sidecar.commands.cli import main
from sidecar.commands.report import bills, load, percentile
from sidecar.config import PriceConfig
from sidecar.telemetry.timeline_log import TimelineLog, run_record
from sidecar.types import (
    ModelCallDetail,
    ProviderTiming,
    RunOutcome,
    Stage,
    StageKind,
    StopReason,
    ToolCallStatus,
    ToolOutcome,
    Usage,
)


def test_cached_prompt_tokens_are_charged_at_the_cached_price() -> None:
    table = PriceTable({"m": PriceConfig(prompt=2.0, completion=8.0, cached_prompt=0.5)})
    cost = table.cost(
        "m", Usage(prompt_tokens=1_000_000, completion_tokens=250_000, cached_prompt_tokens=400_000)
    )
    assert cost is not None
    assert math.isclose(cost.cached_prompt_usd, 0.2)  # 0.4 M at $0.5
    assert math.isclose(cost.prompt_usd, 0.6 * 2.0 + 0.2)
    assert math.isclose(cost.completion_usd, 0.25 * 8.0)
    assert math.isclose(cost.total_usd, 1.4 + 2.0)


def test_without_a_cached_price_every_prompt_token_costs_the_prompt_price() -> None:
    table = PriceTable({"m": PriceConfig(prompt=1.0, completion=1.0)})
    cost = table.cost(
        "m", Usage(prompt_tokens=3_000, completion_tokens=0, cached_prompt_tokens=2_000)
    )
    assert cost is not None
    assert math.isclose(cost.prompt_usd, 0.003) and math.isclose(cost.cached_prompt_usd, 0.002)


def test_groqs_published_prices_ship_and_configured_ones_win() -> None:
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)
    shipped = PriceTable({}).cost("openai/gpt-oss-120b", usage)
    assert shipped is not None and math.isclose(shipped.total_usd, 0.75)
    mine = PriceTable({"openai/gpt-oss-120b": PriceConfig(prompt=1.0, completion=1.0)})
    overridden = mine.cost("openai/gpt-oss-120b", usage)
    assert overridden is not None and overridden.total_usd == 2.0


def test_a_simulated_run_is_priced_as_the_configured_model_and_says_so() -> None:
    table = PriceTable({}, priced_as="openai/gpt-oss-20b", simulated=True)
    cost = table.cost("llm-simulator", Usage(prompt_tokens=1_000_000))
    assert cost is not None and (cost.priced_as, cost.simulated) == ("openai/gpt-oss-20b", True)
    assert math.isclose(cost.total_usd, 0.075)


def test_a_model_missing_from_the_price_table_has_no_cost() -> None:
    assert PriceTable({}).cost("unpriced", Usage(prompt_tokens=10)) is None


def test_a_run_on_an_unpriced_model_names_it_instead_of_a_number() -> None:
    table = PriceTable({})
    stages = [
        Stage(
            kind=StageKind.MODEL_CALL,
            name=name,
            step=1,
            start=0.0,
            duration=0.1,
            detail=ModelCallDetail(
                usage=Usage(prompt_tokens=5),
                provider=ProviderTiming(),
                time_to_first_token=None,
                attempts=1,
            ),
        )
        for name in ("openai/gpt-oss-20b", "qwen/qwen3.6-27b", "qwen/qwen3.6-27b")
    ]
    usage = Usage(prompt_tokens=10, completion_tokens=5)
    assert table.run_cost("openai/gpt-oss-120b", usage, stages) is None
    assert table.unpriced("openai/gpt-oss-120b", stages) == ("qwen/qwen3.6-27b",)
    assert PriceTable({}, priced_as="qwen/qwen3.6-27b").unpriced("llm-simulator", []) == (
        "qwen/qwen3.6-27b",
    )


def test_every_shipped_price_names_its_source_and_date_and_retired_models_stay_priced() -> None:
    for entry in CATALOG.values():
        if entry.price is not None:
            assert entry.price.source.startswith("https://") and entry.price.checked
    for name in retired_names():
        entry = CATALOG[name]
        assert entry.status == "retired" and entry.retirement is not None
        assert entry.retirement.replacement in CATALOG
        assert CATALOG[entry.retirement.replacement].status != "retired"
        assert PriceTable({}).cost(name, Usage(completion_tokens=1)) is not None


def test_percentiles_interpolate_like_numpy() -> None:
    rng = random.Random(3)
    for size in (1, 2, 7, 100):
        values = sorted(rng.uniform(0, 1) for _ in range(size))
        for q in (50, 95, 99):
            assert math.isclose(percentile(values, q), float(numpy.percentile(values, q)))


def _outcome(model_ms: float, tool_ms: tuple[float, float], label_offset: float) -> RunOutcome:
    """A run: queue 1 ms, one model call, two concurrent tools, a second model call."""
    usage = Usage(prompt_tokens=100, completion_tokens=10)
    model = ModelCallDetail(
        usage=usage, provider=ProviderTiming(), time_to_first_token=model_ms / 2e3, attempts=1
    )
    stages = [Stage(kind=StageKind.QUEUE, name="queue", step=0, start=0.0, duration=0.001)]
    at = 0.001
    stages.append(
        Stage(
            kind=StageKind.MODEL_CALL,
            name="m",
            step=1,
            start=at,
            duration=model_ms / 1e3,
            detail=model,
        )
    )
    at += model_ms / 1e3
    for name, duration in zip(("lookup", "fetch"), tool_ms, strict=True):
        outcome = ToolOutcome(
            call_id=name,
            tool_name=name,
            status=ToolCallStatus.OK,
            content="",
            start=at,
            duration=duration / 1e3,
            handler_duration=duration / 2e3,
            attempts=1,
            wait_duration=0.0,
        )
        stages.append(Stage.of_tool_call(1, outcome))
    at += max(tool_ms) / 1e3
    stages.append(
        Stage(
            kind=StageKind.MODEL_CALL,
            name="m",
            step=2,
            start=at,
            duration=model_ms / 1e3,
            detail=model,
        )
    )
    at += model_ms / 1e3
    overhead = 0.0005 + label_offset
    stages.append(
        Stage(kind=StageKind.OVERHEAD, name="sidecar", step=0, start=0.0, duration=overhead)
    )
    usage_total = Usage(prompt_tokens=200, completion_tokens=20)
    return RunOutcome(
        answer="ok",
        stop_reason=StopReason.ANSWERED,
        usage=usage_total,
        stages=stages,
        total=at + overhead,
        steps=2,
        tool_calls=2,
    )


def _write_log(path: Path) -> None:
    log = TimelineLog(path)
    for label, extra in (("release-a", 0.0), ("release-b", 0.002)):
        for i in range(1, 101):
            log.write(
                run_record(
                    label=label,
                    run_id=f"{label}-{i}",
                    session_id="s",
                    profile="default",
                    model="m",
                    outcome=_outcome(model_ms=i, tool_ms=(10.0, 20.0), label_offset=extra),
                    reason=StopReason.ANSWERED,
                )
            )
    log.write(
        run_record(
            label="release-b",
            run_id="cancelled",
            session_id="s",
            profile="default",
            model="m",
            outcome=None,
            reason=StopReason.CANCELLED,
        )
    )
    log.close()


def test_the_bill_has_each_stage_and_tool_with_percentiles_and_shares(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    _write_log(path)
    a, b = bills(load([path]))
    assert (a.label, b.label) == ("release-a", "release-b")
    model = next(r for r in a.stages if r.name == "model_call")
    assert model.count == 200
    assert math.isclose(model.p(50), 0.0505)  # 1..100 ms, twice
    tools = next(r for r in a.stages if r.name == "tools")
    assert tools.count == 100 and math.isclose(tools.p(99), 0.020)  # the slower of the two
    assert [t.name for t in a.tools] == ["fetch", "lookup"]
    # The stage rows add up to the whole run.
    assert math.isclose(sum(r.share or 0 for r in a.stages), 1.0)
    overhead = next(r for r in b.stages if r.name == "overhead")
    assert math.isclose(overhead.mean, 0.0025)
    assert b.stop_reasons == {"answered": 100, "cancelled": 1}
    assert b.run.count == 100  # the cancelled run has no timeline


def test_the_report_command_prints_the_bill_and_writes_the_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "timeline.jsonl"
    _write_log(log)
    png = tmp_path / "bill.png"
    assert main(["report", str(log), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "== release-a: 100 runs" in out and "== release-b: 101 runs" in out
    model_line = next(line for line in out.splitlines() if line.strip().startswith("model_call"))
    assert model_line.split()[1:5] == ["200", "50.50", "50.50", "95.05"]
    assert "tool fetch" in out and "stop reasons: answered 100, cancelled 1" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_report_names_a_line_that_is_not_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "broken.jsonl"
    log.write_text('{"label": "x", "stages": []}\nnot json\n')
    assert main(["report", str(log), "--no-png"]) == 2
    assert "broken.jsonl:2" in capsys.readouterr().err
