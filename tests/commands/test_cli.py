"""The command lines as a newcomer and an operator use them."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar import testing
from sidecar.telemetry import own_version
from tests.support import SCRIPTED_TOOLSERVER, SUPPORT
from tests.support.a2a import A2A_SKILLS
from tests.support.port_holder import held_port


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_version_prints_the_version_and_exits_zero() -> None:
    done = run("-m", "sidecar", "--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"agent-sidecar {own_version()}")


def test_a_bad_log_level_is_a_clear_error_not_a_traceback() -> None:
    done = run("-m", "sidecar", "serve", "--log-level", "loud")
    assert done.returncode == 2
    assert "'loud' is not a log level" in done.stderr and "Traceback" not in done.stderr


def test_serve_takes_its_log_level_and_format_after_the_command(tmp_path: Path) -> None:
    log = tmp_path / "log"
    config = testing.sidecar_config(
        "127.0.0.1:9", {}, model={"base_url": "http://127.0.0.1:9/v1", "keyless": True}
    )
    with open(log, "w") as stderr:
        side = testing.sidecar(
            config, tmp_path, flags=["--log-level", "info", "--log-format", "json"], stderr=stderr
        )
        # Serving means past "listening on" to where SIGTERM drains (and logs it).
        testing.wait_serving(side.address, timeout=30)
        assert side.stop() == 0
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    assert any(line["level"] == "INFO" for line in lines)


def test_the_log_level_and_format_come_from_the_environment_too(tmp_path: Path) -> None:
    log = tmp_path / "log"
    config = testing.sidecar_config(
        "127.0.0.1:9", {}, model={"base_url": "http://127.0.0.1:9/v1", "keyless": True}
    )
    env = {"AGENT_SIDECAR_LOG_LEVEL": "info", "AGENT_SIDECAR_LOG_FORMAT": "json"}
    with open(log, "w") as stderr:
        side = testing.sidecar(config, tmp_path, stderr=stderr, env=env)
        testing.wait_serving(side.address, timeout=30)
        assert side.stop() == 0
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert lines and any(line["level"] == "INFO" for line in lines)
    refused = subprocess.run(
        [sys.executable, "-m", "sidecar", "check", "--offline"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENT_SIDECAR_LOG_LEVEL": "loud"},
        check=False,
    )
    assert refused.returncode == 2 and "AGENT_SIDECAR_LOG_LEVEL must be one of" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_tool_server_command_prints_help_and_exits_zero() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "agent-toolserver"), "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and "usage: agent-toolserver" in done.stdout


def test_a_second_sidecar_in_the_same_directory_says_whose_file_it_is(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text("server: {port: 0}\n")  # the default store: agent-sidecar.db, here
    first = testing.start_process(
        ["-m", "sidecar", "serve", "--config", str(config)], cwd=tmp_path, env={"GROQ_API_KEY": ""}
    )
    try:
        second = subprocess.run(
            [sys.executable, "-m", "sidecar", "serve", "--config", str(config)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GROQ_API_KEY": ""},
            check=False,
        )
    finally:
        first.stop()
    assert second.returncode == 1
    message = second.stderr
    assert str(tmp_path / "agent-sidecar.db") in message and f"process {first.pid}" in message
    assert "Traceback" not in message


def test_an_endpoint_without_its_key_stops_the_sidecar_at_start(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text("model: {base_url: 'http://127.0.0.1:9/v1', api_key_env: NO_SUCH_KEY}\n")
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "NO_SUCH_KEY"},
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "NO_SUCH_KEY is unset or empty" in done.stderr and "model.keyless" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_answer_schema_that_cannot_check_answers_stops_the_sidecar_naming_the_key(
    tmp_path: Path,
) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        "profiles:\n  reports:\n    answer_schema: {type: object, properties: {a: {type: nope}}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GROQ_API_KEY": ""},
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "profiles.reports.answer_schema" in done.stderr and "Traceback" not in done.stderr


def _check(
    config: Path, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", "check", "--config", str(config), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GROQ_API_KEY": "", **(env or {})},
        check=False,
    )


def test_check_finds_a_tool_a_profile_names_and_no_server_offers(tmp_path: Path) -> None:
    with testing.tool_server(str(SCRIPTED_TOOLSERVER)) as tools:
        config = testing.sidecar_config(
            "127.0.0.1:9",
            {"scripted": tools.address},
            profiles={
                "typo": {"tools": ["slow_read", "slow_reed", "scripted.hang"]},
                "fine": {"tools": ["scripted.slow_read"]},
            },
        )
        path = tmp_path / "sidecar.yaml"
        path.write_text(yaml.safe_dump(config))
        found = _check(path)
        offline = _check(path, "--offline")
    assert found.returncode == 1, found.stdout + found.stderr
    problems = [line for line in found.stdout.splitlines() if line.startswith("problem:")]
    assert problems == [
        "problem: profile typo names tool 'slow_reed', which no tool server offers "
        "(did you mean 'slow_read'?)"
    ]
    assert offline.returncode == 0 and "ok" in offline.stdout


def test_check_says_why_a_configuration_would_not_start(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "server": {"host": "0.0.0.0"},
                "auth": {"principals": [{"name": "svc", "token_env": "SVC_TOKEN"}]},
                "tool_servers": [{"name": "down", "address": "127.0.0.1:9"}],
            }
        )
    )
    done = _check(path, env={"SVC_TOKEN": ""})
    assert done.returncode == 2
    assert "SVC_TOKEN is unset or empty" in done.stdout
    assert "in plaintext" in done.stdout and "would not start" in done.stdout
    unreachable = tmp_path / "unreachable.yaml"
    unreachable.write_text(
        yaml.safe_dump(
            {"tool_servers": [{"name": "down", "address": "127.0.0.1:9", "discovery_timeout": 1}]}
        )
    )
    done = _check(unreachable)
    assert done.returncode == 1 and "tool server down (127.0.0.1:9) did not list" in done.stdout
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("profiles: {p: {max_stepz: 3}}\n")
    done = _check(invalid)
    assert done.returncode == 2 and "profiles.p.max_stepz" in done.stdout


def test_check_fills_variables_in_its_file_from_its_environment_as_serve_does(
    tmp_path: Path,
) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        "server: {port: 0, unix_socket: '${SOCKET_DIR}/sidecar.sock'}\n"
        "model: {base_url: 'http://${MODEL_HOST:-127.0.0.1:9}/v1', keyless: true}\n"
        "profiles: {default: {max_steps: '${STEPS}'}}\n"
    )
    environ = {k: v for k, v in os.environ.items() if k not in ("SOCKET_DIR", "STEPS")}
    unset = subprocess.run(
        [sys.executable, "-m", "sidecar", "check", "--offline", "--config", str(config)],
        capture_output=True, text=True, timeout=60, env=environ, check=False,
    )  # fmt: skip
    assert unset.returncode == 2
    assert "the environment variable SOCKET_DIR is not set" in unset.stdout
    set_ = _check(config, "--offline", env={"SOCKET_DIR": str(tmp_path), "STEPS": "4"})
    assert set_.returncode == 0, set_.stdout + set_.stderr
    wrong = _check(config, "--offline", env={"SOCKET_DIR": str(tmp_path), "STEPS": "0"})
    assert wrong.returncode == 2 and "profiles.default.max_steps" in wrong.stdout


def test_serve_fills_variables_in_its_file_from_its_environment(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        "server: {port: 0, unix_socket: '${SOCKET_DIR}/sidecar.sock'}\n"
        "model: {base_url: 'http://${MODEL_HOST:-127.0.0.1:9}/v1', keyless: true}\n"
        "sessions: {store: memory}\n"
    )
    environ = {k: v for k, v in os.environ.items() if k not in ("SOCKET_DIR", "MODEL_HOST")}
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "server.unix_socket: the environment variable SOCKET_DIR is not set" in done.stderr
    assert "Traceback" not in done.stderr
    side = testing.start_process(
        ["-m", "sidecar", "serve", "--config", str(config)],
        cwd=tmp_path,
        env={"SOCKET_DIR": str(tmp_path)},
    )
    try:
        assert side.announced("socket on ") == f"unix:{tmp_path}/sidecar.sock"
        testing.wait_serving(side.address, timeout=30)  # SIGTERM now drains
    finally:
        assert side.stop() == 0


def test_check_lists_mcp_servers_tools_and_names_their_missing_secrets(tmp_path: Path) -> None:
    edge = {
        "name": "edge",
        "command": sys.executable,
        "args": [str(SUPPORT / "mcp_edge_server.py")],
    }
    config = testing.sidecar_config(
        "127.0.0.1:9",
        [],
        mcp_servers=[edge],
        profiles={"default": {"tools": ["echo", "edge.slow", "nothing_like_it"]}},
    )
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config))
    found = _check(path)
    config["mcp_servers"][0]["env_from"] = {"TOKEN": "EDGE_TOKEN_UNSET"}
    path.write_text(yaml.safe_dump(config))
    refused = _check(path, "--offline")
    assert found.returncode == 1, found.stdout + found.stderr
    problems = [line for line in found.stdout.splitlines() if line.startswith("problem:")]
    assert problems == [
        "problem: profile default names tool 'nothing_like_it', which no tool server offers"
    ]
    assert refused.returncode == 2 and "EDGE_TOKEN_UNSET" in refused.stdout


def _serve_refused(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=testing.scaled(60),
        env={**os.environ, "GROQ_API_KEY": ""},
        check=False,
        cwd=config.parent,
    )


@pytest.mark.parametrize(
    "key",
    ["server.port", "server.health_port", "telemetry.metrics.port", "mcp.port", "a2a.http.port"],
)
def test_a_taken_port_stops_the_sidecar_naming_the_process_that_holds_it(
    tmp_path: Path, key: str
) -> None:
    with held_port() as (port, pid):
        section, _, leaf = key.rpartition(".")
        settings: dict[str, Any] = {"server": {"port": 0}, "sessions": {"store": "memory"}}
        if key == "telemetry.metrics.port":
            settings["telemetry"] = {"metrics": {"enabled": True}}
        if key == "a2a.http.port":
            settings["a2a"] = {"skills": A2A_SKILLS, "http": {}}
        node = settings
        for part in section.split("."):
            node = node.setdefault(part, {})
        node[leaf] = port
        config = tmp_path / "sidecar.yaml"
        config.write_text(yaml.safe_dump(settings))
        done = _serve_refused(config)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"agent-sidecar: {key}: cannot listen on 127.0.0.1:{port}: "), line
    assert f"port {port} is in use by process {pid} (" in line and "-c" in line
    # Neither gRPC's C-core line nor a traceback: the one line says it all.
    assert "Traceback" not in done.stderr and "add_port" not in done.stderr


def test_a_second_sidecar_on_a_taken_port_is_refused_and_the_first_shares_it_with_no_one(
    tmp_path: Path,
) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(yaml.safe_dump({"server": {"port": 0}, "sessions": {"store": "memory"}}))
    first = testing.start_process(
        ["-m", "sidecar", "serve", "--config", str(config)], env={"GROQ_API_KEY": ""}
    )
    try:
        port = first.port
        config.write_text(
            yaml.safe_dump({"server": {"port": port}, "sessions": {"store": "memory"}})
        )
        # gRPC's default would let any process of this user that asks for SO_REUSEPORT
        # bind the same port and take a share of the first one's calls.
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        with squatter, pytest.raises(OSError) as refused:
            squatter.bind(("127.0.0.1", port))
        assert refused.value.errno == errno.EADDRINUSE
        second = _serve_refused(config)
    finally:
        first.stop()
    assert second.returncode == 2
    assert f"port {port} is in use by process {first.pid} (" in second.stderr
    assert "Traceback" not in second.stderr


def test_the_help_speaks_to_users_and_names_the_first_commands() -> None:
    done = run("-m", "sidecar", "--help")
    assert done.returncode == 0
    assert "agent-sidecar serve --config sidecar.yaml" in done.stdout
    assert "agent-sidecar check --config sidecar.yaml" in done.stdout
    assert "Each command has its own --help" in done.stdout
    # The module's docstring is for its maintainers.
    assert "below this module" not in done.stdout
