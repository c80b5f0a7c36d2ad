"""The window and the trimming on their own: pure functions over made-up sessions."""

from __future__ import annotations

import itertools

import orjson

from sidecar.config import ContextConfig
from sidecar.context.trim import ResultTrimmer, cap, field_tree, project
from sidecar.context.window import MEMORY_PREFIX, WindowPolicy
from sidecar.tokens import tokens_of
from sidecar.types import StopReason, Turn

RESULT_CHARS = 3_000


def _turn(i: int, result_chars: int = RESULT_CHARS) -> Turn:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "big_read", "arguments": "{}"}}
    return Turn(
        run_id=f"r{i}",
        input=f"question {i}",
        answer=f"answer {i}",
        stop_reason=StopReason.ANSWERED,
        start_time=float(i),
        end_time=float(i) + 0.5,
        messages=[
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"{i:04d}" + "r" * result_chars},
            {"role": "assistant", "content": f"answer {i}"},
        ],
    )


def _policy(**options: object) -> WindowPolicy:
    return WindowPolicy(ContextConfig.model_validate(options))


def _users(messages: list[dict[str, object]]) -> list[object]:
    return [m["content"] for m in messages if m["role"] == "user"]


def test_a_history_that_fits_is_sent_whole() -> None:
    turns = [_turn(i) for i in range(3)]
    window = _policy(max_tokens=100_000).build(
        turns, memory="", memory_turns=0, prefix_tokens=300, input_tokens=10
    )
    assert window.messages == [m for t in turns for m in t.messages]
    assert window.first_turn == 0 and window.trimmed_results == 0


def test_with_the_window_off_every_turn_is_sent_however_long() -> None:
    turns = [_turn(i) for i in range(50)]
    window = _policy(max_tokens=None).build(
        turns, memory="", memory_turns=0, prefix_tokens=300, input_tokens=10
    )
    assert len(_users(window.messages)) == 50


def test_older_tool_results_are_trimmed_before_any_turn_is_dropped() -> None:
    turns = [_turn(i) for i in range(6)]
    policy = _policy(max_tokens=4_000, keep_recent_turns=2, old_tool_result_chars=100)
    window = policy.build(turns, memory="", memory_turns=0, prefix_tokens=300, input_tokens=10)
    assert window.first_turn == 0  # trimming alone made it fit
    assert window.trimmed_results == 4
    results = [m["content"] for m in window.messages if m["role"] == "tool"]
    assert all(r.endswith("chars]") and len(r) <= 100 for r in results[:4])
    assert "…[trimmed " in results[0]
    # The recent turns are whole, byte for byte.
    assert window.messages[-8:] == [m for t in turns[-2:] for m in t.messages]
    assert window.tokens <= 4_000


def test_over_a_50_turn_session_the_window_stays_in_budget_and_moves_in_batches() -> None:
    policy = _policy(
        max_tokens=6_000, keep_recent_turns=2, old_tool_result_chars=200, drop_batch_turns=4
    )
    turns: list[Turn] = []
    starts = []
    for i in range(50):
        window = policy.build(turns, memory="", memory_turns=0, prefix_tokens=300, input_tokens=10)
        assert window.tokens <= 6_000
        # Estimated from the messages actually sent, not from bookkeeping.
        assert 300 + 10 + tokens_of(window.messages) <= 6_000 * 1.05
        sent = _users(window.messages)
        assert sent == [f"question {j}" for j in range(window.first_turn, i)]
        if i >= 2:  # the two most recent turns are whole
            assert window.messages[-8:] == [m for t in turns[-2:] for m in t.messages]
        starts.append(window.first_turn)
        turns.append(_turn(i))
    assert starts == sorted(starts)
    moves = {b for a, b in itertools.pairwise(starts) if b != a}
    assert moves and all(s % 4 == 0 for s in moves)  # whole batches only
    assert len(moves) < 50 // 4 + 1
    assert starts[-1] > 0  # old turns were dropped


def test_recent_turns_stay_whole_even_above_the_budget() -> None:
    turns = [_turn(i, result_chars=20_000) for i in range(4)]
    policy = _policy(max_tokens=1_000, keep_recent_turns=2)
    window = policy.build(turns, memory="", memory_turns=0, prefix_tokens=300, input_tokens=10)
    assert window.first_turn == 2
    assert window.messages == [m for t in turns[2:] for m in t.messages]


def test_with_memory_on_a_turn_is_sent_until_the_memory_covers_it() -> None:
    turns = [_turn(i) for i in range(30)]
    policy = _policy(max_tokens=4_000, keep_recent_turns=2, drop_batch_turns=4, memory=True)
    window = policy.build(turns, memory="", memory_turns=0, prefix_tokens=300, input_tokens=10)
    assert window.summarise is not None and window.summarise[0] == 0
    end = window.summarise[1]
    assert end % 4 == 0 and end > 0
    assert _users(window.messages)[0] == "question 0"  # not lost before it is summarised

    covered = policy.build(
        turns,
        memory="the user asked about 0..7",
        memory_turns=end,
        prefix_tokens=300,
        input_tokens=10,
    )
    assert covered.messages[0] == {
        "role": "system",
        "content": MEMORY_PREFIX + "the user asked about 0..7",
    }
    assert _users(covered.messages)[0] == f"question {end}"
    assert covered.first_turn == end


def test_declared_fields_are_kept_through_objects_and_arrays() -> None:
    output = {
        "status": "shipped",
        "audit": ["a" * 100],
        "parcel": {"eta": "2025-01-03", "scans": [1, 2, 3]},
        "items": [{"sku": "X-1", "raw": "r"}, {"sku": "X-2", "raw": "r"}],
    }
    tree = field_tree(["status", "parcel.eta", "items.sku"])
    assert project(output, tree) == {
        "status": "shipped",
        "parcel": {"eta": "2025-01-03"},
        "items": [{"sku": "X-1"}, {"sku": "X-2"}],
    }
    # A shorter path keeps the whole subtree, whatever order the paths come in.
    assert field_tree(["parcel.eta", "parcel"]) == {"parcel": {}}


def test_a_result_over_the_cap_is_cut_with_a_marker_saying_how_much() -> None:
    text = "x" * 12_345
    cut = cap(text, 1_000)
    assert len(cut) <= 1_000
    assert cut.endswith(f"…[trimmed {12_345 - cut.index('…'):,} chars]")
    assert cap("short", 1_000) == "short"


def test_the_trimmer_keeps_fields_then_caps_and_leaves_errors_and_text_alone() -> None:
    trimmer = ResultTrimmer(200)
    tree = field_tree(["key"])
    output = orjson.dumps({"key": "k", "debug": "d" * 5_000}).decode()
    assert trimmer.trim(output, tree) == '{"key":"k"}'
    assert trimmer.trim("plain text, not JSON", tree) == "plain text, not JSON"
    error = "error: " + "e" * 500
    assert trimmer.trim(error, tree, is_error=True).startswith("error: eee")
    assert len(trimmer.trim(error, tree, is_error=True)) <= 200
    assert ResultTrimmer(None).trim("y" * 50_000, {}) == "y" * 50_000
