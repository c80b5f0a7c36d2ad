"""The configuration reloads without a restart: on SIGHUP and when its file changes.

Runs in flight finish on what they started with; a reload that does not validate, or
that changes what only a restart applies, changes nothing and says why.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
from pathlib import Path
from typing import Any

import grpc
import orjson
import yaml

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.commands.serve import ConfigReloader
from sidecar.config import load_config
from sidecar.security.audit import AuditLog
from sidecar.telemetry import Telemetry
from sidecar.testing.certs import TestCA
from tests.support.stack import (
    SimControl,
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)


def _config_file(workdir: Path) -> Path:
    path = workdir / "sidecar.yaml"
    assert path.exists()
    return path


def _rewrite(path: Path, change: Any) -> None:
    config = yaml.safe_load(path.read_text())
    change(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def _occurrences(log: Path, text: str) -> int:
    return log.read_text().count(text)


async def _log_has(log: Path, text: str, count: int = 1) -> None:
    async def seen() -> bool:
        return _occurrences(log, text) >= count

    await eventually(seen, timeout=10)


def _system_prompts(stats: dict[str, Any]) -> list[str]:
    return [r["messages"][0]["content"] for r in stats["recent_requests"]]


async def test_sighup_reloads_profiles_and_a_run_in_flight_finishes_on_the_old_ones(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        audit = tmp_path / "audit.jsonl"
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {"system_prompt": "Prompt one."}},
            server={"port": 0, "grace_period": 2, "config_watch_interval": None},
            auth={"audit": {"path": str(audit)}},
        )
        log = tmp_path / "stderr.log"
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            path = _config_file(tmp_path)
            control = SimControl(sim.address)
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                stream = client.stream(session.session_id, "three slow reads", timeout=30)
                async for event in stream:
                    if event.HasField("tool_call_started"):
                        break  # the run is in its tools: its next model call is ahead

                def change(c: dict[str, Any]) -> None:
                    c["profiles"]["default"]["system_prompt"] = "Prompt two."
                    c["profiles"]["default"]["tools"] = ["slow_read"]
                    c["profiles"]["narrow"] = {"system_prompt": "Narrow."}

                _rewrite(path, change)
                side.send_signal(signal.SIGHUP)
                await _log_has(log, "configuration reloaded (SIGHUP): profiles")
                events = [e async for e in stream]
                assert events[-1].run_finished.stop_reason == agent_pb2.STOP_REASON_ANSWERED
                in_flight = _system_prompts(await control.stats())
                assert in_flight[-1] == "Prompt one."  # its last call: after the reload

                await control.reset()
                after = await client.create_session()
                await client.run(after.session_id, "two reads", timeout=20)
                stats = await control.stats()
                assert set(_system_prompts(stats)) == {"Prompt two."}
                tools_sent = {t["function"]["name"] for t in stats["last_request"]["tools"]}
                assert tools_sent == {"slow_read"}
                narrow = await client.create_session("narrow")  # a new profile
                assert narrow.profile == "narrow"
        lines = [orjson.loads(line) for line in audit.read_bytes().splitlines()]
        reloaded = [ln for ln in lines if ln["event"] == "config_reloaded"]
        assert reloaded and reloaded[0]["sections"] == ["profiles"]


async def test_a_reload_that_does_not_validate_or_needs_a_restart_changes_nothing(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {"system_prompt": "Kept."}},
            server={"port": 0, "grace_period": 2, "config_watch_interval": 0.1},
            telemetry={"metrics": {"enabled": True, "port": 0}},
        )
        log = tmp_path / "stderr.log"
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            path = _config_file(tmp_path)
            good = path.read_text()
            control = SimControl(sim.address)

            async def prompts_after_a_run() -> set[str]:
                await control.reset()
                async with AgentClient(side.address) as client:
                    session = await client.create_session()
                    await client.run(session.session_id, "two reads", timeout=20)
                return set(_system_prompts(await control.stats()))

            # A typo: refused by validation, named in the log.
            _rewrite(path, lambda c: c["profiles"]["default"].update(max_stepz=3))
            await _log_has(log, "configuration not reloaded (the file changed)")
            assert "max_stepz" in log.read_text()
            assert await prompts_after_a_run() == {"Kept."}

            # Not YAML at all.
            path.write_text("profiles: [unclosed\n")
            await _log_has(log, "configuration not reloaded", count=2)
            assert await prompts_after_a_run() == {"Kept."}

            # A good profile change alongside one that needs a restart: none of it applies.
            path.write_text(good)

            def both(c: dict[str, Any]) -> None:
                c["profiles"]["default"]["system_prompt"] = "Changed."
                c["server"]["max_message_bytes"] = 1 << 20

            _rewrite(path, both)
            await _log_has(log, "take effect only at a restart: server.max_message_bytes")
            assert await prompts_after_a_run() == {"Kept."}

            # A tool server's address, by its place in the list.
            path.write_text(good)
            _rewrite(path, lambda c: c["tool_servers"][0].update(address="127.0.0.1:9"))
            await _log_has(log, "take effect only at a restart: tool_servers[0].address")
            assert await prompts_after_a_run() == {"Kept."}

            # A misspelt key, with the key it meant.
            path.write_text(good)
            _rewrite(path, lambda c: c["server"].update(grace_perod=3))
            await _log_has(log, "server.grace_perod: unknown key; did you mean 'grace_period'?")

            # Put right, the file is picked up by the watch alone.
            path.write_text(good)
            _rewrite(path, lambda c: c["profiles"]["default"].update(system_prompt="Fixed."))
            await _log_has(log, "configuration reloaded (the file changed): profiles")
            assert await prompts_after_a_run() == {"Fixed."}
            assert side.popen.poll() is None  # still serving throughout


ALICE = "alice-reload-token"


def _principals_config(sim: Any, tools: Any, **server: Any) -> dict[str, Any]:
    return sidecar_config(
        sim,
        [{"name": "scripted", "address": tools.address}],
        profiles={"default": {"system_prompt": "Prompt one."}},
        server={"port": 0, "grace_period": 2, "config_watch_interval": 0.05, **server},
        auth={"principals": [{"name": "alice", "token_sha256": _sha(ALICE)}]},
    )


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def _anonymous_refused(address: str, **tls: Any) -> bool:
    async with AgentClient(address, **tls) as anonymous:
        try:
            await anonymous.create_session()
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED, exc
            return True
    return False


async def test_a_reload_cannot_switch_authentication_off(tmp_path: Path) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        log = tmp_path / "stderr.log"
        config = _principals_config(sim, tools)
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            path = _config_file(tmp_path)
            _rewrite(path, lambda c: c.pop("auth"))
            await _log_has(log, "cannot switch caller authentication off")
            assert await _anonymous_refused(side.address)
            async with AgentClient(side.address, token=ALICE) as alice:
                await alice.create_session()


async def test_on_an_exposed_port_a_reload_is_checked_as_start_checks_it(
    tmp_path: Path,
) -> None:
    ca = TestCA(tmp_path / "pki")
    server = ca.issue("sidecar")
    tls = {"tls": True, "ca_file": ca.ca_file}
    with simulator() as sim, scripted_toolserver() as tools:
        log = tmp_path / "stderr.log"
        config = _principals_config(
            sim,
            tools,
            host="0.0.0.0",
            tls={"cert_file": server.cert_file, "key_file": server.key_file},
        )
        with (
            log.open("wb") as stderr,
            sidecar(config, tmp_path, stderr=stderr, ready=False) as side,
        ):
            address = f"127.0.0.1:{side.port}"

            async def serving() -> bool:
                async with AgentClient(address, token=ALICE, **tls) as alice:
                    try:
                        await alice.create_session()
                    except grpc.aio.AioRpcError:
                        return False
                return True

            await eventually(serving, timeout=30)
            path = _config_file(tmp_path)
            good = path.read_text()
            _rewrite(path, lambda c: c.pop("auth"))  # refused at start: exit 2
            await _log_has(log, "configuration not reloaded")
            assert await _anonymous_refused(address, **tls)
            # An allowed change after the refused one is applied: the watch goes on.
            path.write_text(good)
            _rewrite(path, lambda c: c["profiles"]["default"].update(system_prompt="Two."))
            await _log_has(log, "configuration reloaded (the file changed): profiles")
            assert await _anonymous_refused(address, **tls)


async def test_a_reload_that_leaves_server_alone_is_still_checked_for_exposure(
    tmp_path: Path,
) -> None:
    # Bound beyond loopback in plaintext, anonymous by choice (server.insecure): adding a
    # principal with a bearer token would send that token across the network in clear,
    # which start refuses whatever insecure says; so must a reload that changes only auth.
    with simulator() as sim, scripted_toolserver() as tools:
        log = tmp_path / "stderr.log"
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            server={"port": 0, "host": "0.0.0.0", "insecure": True, "config_watch_interval": 0.05},
        )
        with (
            log.open("wb") as stderr,
            sidecar(config, tmp_path, stderr=stderr, ready=False) as side,
        ):
            address = f"127.0.0.1:{side.port}"
            async with AgentClient(address) as anonymous:
                await anonymous.wait_ready(30)
                await anonymous.create_session()
            path = _config_file(tmp_path)
            _rewrite(
                path,
                lambda c: c.setdefault("auth", {}).update(
                    principals=[{"name": "alice", "token_sha256": _sha(ALICE)}]
                ),
            )
            await _log_has(log, "configuration not reloaded")
            assert "their tokens would cross the network in plaintext" in log.read_text()
            async with AgentClient(address) as anonymous:  # still as it was: not applied
                await anonymous.create_session()


async def test_a_file_caught_half_written_is_never_applied(tmp_path: Path) -> None:
    # A writer that truncates the file, pauses, writes half of it, pauses, and finishes,
    # again and again, while anonymous callers knock: none gets in, and every complete
    # file is applied in the end.
    with simulator() as sim, scripted_toolserver() as tools:
        log = tmp_path / "stderr.log"
        config = _principals_config(sim, tools)
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            path = _config_file(tmp_path)
            document = yaml.safe_load(path.read_text())
            document["auth"] = document.pop("auth")  # last: the half before it is whole
            served: list[str] = []
            refused = 0
            done = asyncio.Event()

            async def knock() -> None:
                nonlocal refused
                async with AgentClient(side.address) as anonymous:
                    while not done.is_set():
                        try:
                            session = await anonymous.create_session()
                            served.append(session.session_id)
                        except grpc.aio.AioRpcError as exc:
                            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED, exc
                            refused += 1
                        await asyncio.sleep(0.005)

            async def write() -> None:
                for round_ in range(8):
                    document["profiles"]["default"]["system_prompt"] = f"Prompt {round_}."
                    text = yaml.safe_dump(document, sort_keys=False)
                    half = text[: text.index("auth:")]
                    with path.open("w") as file:  # truncated
                        file.flush()
                        await asyncio.sleep(0.15)
                        file.write(half)
                        file.flush()
                        await asyncio.sleep(0.15)
                        file.write(text[len(half) :])
                await _log_has(log, "configuration reloaded (the file changed): profiles")
                done.set()

            async with asyncio.timeout(60):
                await asyncio.gather(knock(), write())
            assert served == [] and refused > 0
            assert "Prompt 7." in path.read_text()
            control = SimControl(sim.address)
            await control.reset()

            async def last_prompt_applied() -> bool:
                async with AgentClient(side.address, token=ALICE) as alice:
                    session = await alice.create_session()
                    await alice.run(session.session_id, "hello", timeout=20)
                return "Prompt 7." in _system_prompts(await control.stats())

            await eventually(last_prompt_applied, timeout=10)


async def test_an_unusable_answer_schema_is_refused_on_reload_and_the_watch_goes_on(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        log = tmp_path / "stderr.log"
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {"system_prompt": "Kept."}},
            server={"port": 0, "grace_period": 2, "config_watch_interval": 0.05},
        )
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            path = _config_file(tmp_path)
            schema = {"type": "object", "properties": {"a": {"type": "nope"}}}
            _rewrite(path, lambda c: c["profiles"]["default"].update(answer_schema=schema))
            await _log_has(log, "profiles.default.answer_schema")
            _rewrite(path, lambda c: c["profiles"]["default"].pop("answer_schema"))
            _rewrite(path, lambda c: c["profiles"]["default"].update(system_prompt="Next."))
            await _log_has(log, "configuration reloaded (the file changed): profiles")
            assert "Traceback" not in log.read_text()
            assert side.popen.poll() is None


class _Failing:
    """A runtime whose reload fails with a bug the first time."""

    def __init__(self, tmp_path: Path) -> None:
        self.audit = AuditLog(str(tmp_path / "audit.jsonl"))
        self.telemetry = Telemetry(label="test")
        self.calls = 0
        self.applied = asyncio.Event()

    async def check_models(self, config: Any) -> None:
        pass  # no model endpoint to ask

    def apply(self, config: Any) -> list[str]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug")
        self.applied.set()
        return ["profiles"]


async def test_a_bug_in_a_reload_never_ends_the_watch(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text("profiles: {default: {}}\n")
    failing = _Failing(tmp_path)
    reloader = ConfigReloader(failing, path, lambda: load_config(path))  # type: ignore[arg-type]
    reloader.watch(0.01)
    try:
        path.write_text("profiles: {default: {system_prompt: One.}}\n")
        async with asyncio.timeout(10):
            while failing.calls < 1:  # noqa: ASYNC110 - the watcher polls the file
                await asyncio.sleep(0.01)
        path.write_text("profiles: {default: {system_prompt: Two.}}\n")
        async with asyncio.timeout(10):
            await failing.applied.wait()
    finally:
        await reloader.close()
    events = [
        orjson.loads(line)["event"] for line in (tmp_path / "audit.jsonl").read_bytes().splitlines()
    ]
    assert events == ["config_reload_refused", "config_reloaded"]
