"""``agent-sidecar record export`` filters, and ``agent-sidecar replay --plot``, through
real processes.

A sidecar on the LLM simulator and the scripted tool server records turns of two
profiles: ``default`` runs on its ``stable`` variant with a ``shadowed`` shadow variant
(each live turn is run again there, and recorded with ``shadow_of``), ``other`` on its
only variant ``blue``. Two turns are recorded before a moment noted by the test, one
after. The export command, as a subprocess, keeps the turns each filter names (a profile,
a variant, a time range, shadow runs or not), writing their lines as they were recorded;
an export replayed with ``--plot`` draws a PNG.
"""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
import yaml

from agentsidecar.client import AgentClient
from sidecar.recording import RecordedTurn, read_turns
from tests.support.stack import (
    MODEL,
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _cli(*args: str, cwd: Path, tz: str = "UTC") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        capture_output=True,
        timeout=60,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "GROQ_API_KEY": "", "TZ": tz},
        check=False,
    )


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the module's sidecar recorded."""

    directory: Path
    config: Path
    lines: dict[str, bytes]
    """Each turn's line as written, by run id."""
    early_stable: str
    """The run ids: the ``default`` turn and the ``other`` turn before ``moment``..."""
    early_blue: str
    late_stable: str
    """... and the ``default`` turn after it."""
    shadows: dict[str, str]
    """Each shadow run's id, by the live run it copied."""
    moment: float
    """Seconds since the epoch, between the early turns and the late one."""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return asyncio.run(_record(tmp_path_factory.mktemp("record-export")))


async def _record(tmp_path: Path) -> Recorded:
    directory = tmp_path / "recordings"
    profiles = {
        "default": {
            "record": 1.0,
            "variants": [
                {"name": "stable", "weight": 1},
                {"name": "shadowed", "weight": 1, "shadow": 1.0},
            ],
        },
        "other": {"record": 1.0, "variants": [{"name": "blue", "weight": 1}]},
    }

    def written() -> list[RecordedTurn]:
        return read_turns([directory]) if directory.exists() else []

    async def until_written(count: int) -> None:
        async def done() -> bool:
            return len(written()) == count

        await eventually(done)

    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles=profiles,
            recording={"path": str(directory)},
            prices={MODEL: {"prompt": 1.0, "completion": 2.0}},
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                for profile, text in (("default", "two reads"), ("other", "hello there")):
                    session = await client.create_session(profile)
                    await client.run(session.session_id, text, timeout=20)
                await until_written(3)  # two live runs, a shadow run of the first
                moment = time.time()
                session = await client.create_session("default")
                await client.run(session.session_id, "conflicting reservations", timeout=20)
                await until_written(5)

    lines = {}
    for path in directory.iterdir():
        for line in path.read_bytes().splitlines(keepends=True):
            lines[orjson.loads(line)["run_id"]] = line
    turns = written()
    live = {(t.profile, t.input): t for t in turns if t.shadow_of is None}
    early_stable = live["default", "two reads"]
    early_blue = live["other", "hello there"]
    late_stable = live["default", "conflicting reservations"]
    assert (early_stable.variant, early_blue.variant, late_stable.variant) == (
        "stable",
        "blue",
        "stable",
    )
    assert max(early_stable.started_at, early_blue.started_at) < moment
    assert late_stable.started_at >= moment
    shadows = {t.shadow_of or "": t.run_id for t in turns if t.shadow_of is not None}
    assert sorted(shadows) == sorted([early_stable.run_id, late_stable.run_id])
    return Recorded(
        directory=directory,
        config=tmp_path / "sidecar.yaml",
        lines=lines,
        early_stable=early_stable.run_id,
        early_blue=early_blue.run_id,
        late_stable=late_stable.run_id,
        shadows=shadows,
        moment=moment,
    )


def _export(recorded: Recorded, *flags: str, tz: str = "UTC") -> list[str]:
    """The run ids an export to standard output holds, in order, checking that each line
    is the one recorded."""
    exported = _cli(
        "record", "export", "--dir", str(recorded.directory), *flags, cwd=recorded.directory, tz=tz
    )
    assert exported.returncode == 0, exported.stderr
    lines = exported.stdout.splitlines(keepends=True)
    run_ids = [orjson.loads(line)["run_id"] for line in lines]
    assert [recorded.lines[r] for r in run_ids] == lines
    assert f"exported {len(lines)} turn(s) from {recorded.directory}".encode() in exported.stderr
    return run_ids


def _shadows_of(recorded: Recorded, *run_ids: str) -> list[str]:
    return [recorded.shadows[r] for r in run_ids]


def test_an_export_by_profile_keeps_that_profiles_live_turns(recorded: Recorded) -> None:
    stable = [recorded.early_stable, recorded.late_stable]
    assert _export(recorded, "--profile", "default") == stable
    assert _export(recorded, "--profile", "other") == [recorded.early_blue]
    assert _export(recorded, "--profile", "missing") == []
    with_shadows = _export(recorded, "--profile", "default", "--shadows")
    assert sorted(with_shadows) == sorted([*stable, *_shadows_of(recorded, *stable)])
    # Without a filter, every live turn; with --shadows, every turn.
    assert sorted(_export(recorded)) == sorted(
        [recorded.early_stable, recorded.early_blue, recorded.late_stable]
    )
    assert sorted(_export(recorded, "--shadows")) == sorted(recorded.lines)


def test_an_export_by_variant_keeps_that_variants_turns(recorded: Recorded) -> None:
    stable = [recorded.early_stable, recorded.late_stable]
    assert _export(recorded, "--variant", "stable") == stable
    assert _export(recorded, "--variant", "blue") == [recorded.early_blue]
    # A shadow variant's runs are shadow runs: left out unless asked for.
    assert _export(recorded, "--variant", "shadowed") == []
    assert sorted(_export(recorded, "--variant", "shadowed", "--shadows")) == sorted(
        _shadows_of(recorded, *stable)
    )
    assert _export(recorded, "--profile", "other", "--variant", "stable") == []


def test_an_export_by_time_keeps_turns_started_from_since_and_before_until(
    recorded: Recorded,
) -> None:
    moment = recorded.moment
    late, early = [recorded.late_stable], [recorded.early_stable, recorded.early_blue]
    assert _export(recorded, "--since", repr(moment)) == late
    assert sorted(_export(recorded, "--until", repr(moment))) == sorted(early)
    assert _export(recorded, "--since", repr(moment), "--until", repr(moment)) == []
    assert sorted(_export(recorded, "--since", repr(moment), "--shadows")) == sorted(
        [*late, *_shadows_of(recorded, recorded.late_stable)]
    )
    assert _export(recorded, "--profile", "other", "--since", repr(moment)) == []

    # ISO 8601: with Z, with another offset, and without one (UTC, whatever the local
    # time zone says: the command runs nine hours east of UTC, then five hours west).
    at = datetime.fromtimestamp(moment, UTC)
    for written in (
        at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        at.astimezone(timezone(timedelta(hours=9))).isoformat(),
        at.replace(tzinfo=None).isoformat(),
    ):
        assert _export(recorded, "--since", written, tz="JST-9") == late, written
        assert sorted(_export(recorded, "--until", written, tz="EST5")) == sorted(early), written

    # The bounds: a turn started at --since is kept, one started at --until is not.
    (turn,) = [t for t in read_turns([recorded.directory]) if t.run_id == recorded.late_stable]
    started = repr(turn.started_at)
    assert _export(recorded, "--since", started) == late
    assert sorted(_export(recorded, "--until", started)) == sorted(early)
    assert _export(recorded, "--since", started, "--until", repr(turn.started_at + 1e-3)) == late


def test_a_time_that_is_no_time_is_refused(recorded: Recorded) -> None:
    exported = _cli(
        "record", "export", "--dir", str(recorded.directory), "--since", "yesterday",
        cwd=recorded.directory,
    )  # fmt: skip
    assert exported.returncode == 2
    assert b"'yesterday' is no time" in exported.stderr
    assert b"Traceback" not in exported.stderr and exported.stdout == b""


def test_a_replay_plot_is_written_as_a_png(recorded: Recorded, tmp_path: Path) -> None:
    export = tmp_path / "default.jsonl"
    exported = _cli(
        "record", "export", "--config", str(recorded.config), "--profile", "default",
        "-o", str(export), cwd=tmp_path,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    config = yaml.safe_load(recorded.config.read_text())
    with simulator() as sim:
        # The same model, scenario and profiles: the replay passes.
        config["model"]["base_url"] = f"http://{sim.address}/openai/v1"
        (tmp_path / "replay.yaml").write_text(yaml.safe_dump(config))
        plot = tmp_path / "nested" / "report.png"
        plot.parent.mkdir()
        replayed = _cli(
            "replay", str(export), "--config", str(tmp_path / "replay.yaml"),
            "--plot", str(plot), cwd=tmp_path,
        )  # fmt: skip
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert b"replay of 2 recorded turn(s)" in replayed.stdout
    assert f"plot: {plot}".encode() in replayed.stdout
    png = plot.read_bytes()
    assert png[:8] == PNG_SIGNATURE
    # The header chunk comes first: the image's size in pixels.
    length, kind, width, height = struct.unpack(">I4sII", png[8:24])
    assert (length, kind) == (13, b"IHDR")
    assert width >= 300 and height >= 300
    assert len(png) > 10_000
    assert png.endswith(b"IEND\xaeB`\x82")


@pytest.mark.parametrize("how", ["itself", "a link", "a hard link"])
def test_an_export_onto_a_recording_it_reads_is_refused_and_loses_nothing(
    recorded: Recorded, tmp_path: Path, how: str
) -> None:
    [first, *_] = sorted(recorded.directory.glob("*.jsonl"))
    before = first.read_bytes()
    out = first
    if how == "a link":
        out = tmp_path / "export.jsonl"
        out.symlink_to(first)
    elif how == "a hard link":
        out = tmp_path / "export.jsonl"
        out.hardlink_to(first)
    exported = _cli(
        "record", "export", "--dir", str(recorded.directory), "-o", str(out), cwd=tmp_path
    )
    assert exported.returncode == 2
    assert b"is one of the recordings the export reads" in exported.stderr
    assert b"Traceback" not in exported.stderr
    assert first.read_bytes() == before


def test_a_failed_export_leaves_its_output_as_it_was(recorded: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    out.write_bytes(b"an earlier export\n")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "a.jsonl").write_bytes(next(iter(recorded.lines.values())) + b"not json\n")
    exported = _cli("record", "export", "--dir", str(broken), "-o", str(out), cwd=tmp_path)
    assert exported.returncode == 2 and b"not JSON" in exported.stderr
    assert out.read_bytes() == b"an earlier export\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    done = _cli("record", "export", "--dir", str(recorded.directory), "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(out.read_bytes().splitlines(keepends=True)) == sorted(
        line for line in recorded.lines.values() if orjson.loads(line).get("shadow_of") is None
    )
