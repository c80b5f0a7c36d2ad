"""The operator's hand on a profile's variants (``VariantService``, ``agent-sidecar
variants``), through real sidecars against the LLM simulator: weights, promotion,
rollback and reset change where new sessions go, are audited, survive a restart, reach
every replica sharing a PostgreSQL store, and yield to a newer configuration.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import variants_pb2, variants_pb2_grpc
from sidecar.agent.variant_control import VariantControl
from sidecar.agent.variants import RunModels, Variant, VariantRouter
from sidecar.config import RollbackConfig, parse_config
from sidecar.errors import InvalidRequest, NotAnOperator, PermissionDenied
from sidecar.security.audit import AuditLog
from sidecar.security.identity import ANONYMOUS, Principal
from sidecar.sessions.store import MemorySessionStore
from sidecar.testing import PostgresServer, ServerProcess, create_database, drop_database
from tests.support.stack import (
    eventually,
    scrape,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

pb = variants_pb2
OPERATOR, USER = "op-token-1", "user-token-1"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


PRINCIPALS = [
    {"name": "op", "token_sha256": _digest(OPERATOR), "operator": True},
    {"name": "user", "token_sha256": _digest(USER)},
]
PROFILES = {
    "default": {
        "variants": [
            {"name": "stable", "weight": 1, "model": {"model": "stable-model"}},
            {"name": "canary", "weight": 1, "model": {"model": "canary-model"}},
        ],
        "rollback": {"min_runs": 1000},  # only the operator rolls back here
    }
}


@pytest.fixture(scope="module")
def tools() -> Iterator[ServerProcess]:
    with scripted_toolserver() as server:
        yield server


def _config(sim: ServerProcess, tools: ServerProcess, tmp_path: Path, **extra: Any) -> Any:
    return sidecar_config(
        sim,
        [{"name": "scripted", "address": tools.address}],
        profiles=PROFILES,
        auth={"principals": PRINCIPALS, "audit": {"path": str(tmp_path / "audit.jsonl")}},
        telemetry={"metrics": {"enabled": True, "port": 0}},
        **extra,
    )


def _auth(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


class _Variants:
    """The variant service of one sidecar, as one principal."""

    def __init__(self, channel: grpc.aio.Channel, token: str) -> None:
        self.stub = variants_pb2_grpc.VariantServiceStub(channel)
        self.meta = _auth(token)

    async def list(self, profile: str = "default") -> pb.ProfileVariants:
        answer = await self.stub.ListVariants(
            pb.ListVariantsRequest(profile=profile), metadata=self.meta, timeout=10
        )
        [one] = answer.profiles
        return one

    async def set(self, reason: str = "", **weights: float) -> pb.ProfileVariants:
        answer = await self.stub.SetVariantWeights(
            pb.SetVariantWeightsRequest(profile="default", weights=weights, reason=reason),
            metadata=self.meta,
            timeout=10,
        )
        return answer.profile

    async def promote(self, variant: str) -> pb.ProfileVariants:
        answer = await self.stub.PromoteVariant(
            pb.PromoteVariantRequest(profile="default", variant=variant, reason="good"),
            metadata=self.meta,
            timeout=10,
        )
        return answer.profile

    async def roll_back(self, variant: str, reason: str = "") -> pb.ProfileVariants:
        answer = await self.stub.RollBackVariant(
            pb.RollBackVariantRequest(profile="default", variant=variant, reason=reason),
            metadata=self.meta,
            timeout=10,
        )
        return answer.profile

    async def reset(self) -> pb.ProfileVariants:
        answer = await self.stub.ResetVariants(
            pb.ResetVariantsRequest(profile="default", reason="back to the file"),
            metadata=self.meta,
            timeout=10,
        )
        return answer.profile


def _by_name(profile: pb.ProfileVariants) -> dict[str, pb.VariantStatus]:
    return {v.name: v for v in profile.variants}


async def _new_sessions_go_to(client: AgentClient, runs: int = 6) -> set[str]:
    variants = set()
    for _ in range(runs):
        session = await client.create_session()
        result = await client.run(session.session_id, "two reads", timeout=20)
        variants.add(result.result.variant)
    return variants


async def _refused(call: Any) -> tuple[grpc.StatusCode, Any]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), error_details(caught.value)


async def test_an_operator_sets_weights_rolls_back_promotes_and_resets_and_each_is_audited(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        config = _config(sim, tools, tmp_path)
        with sidecar(config, tmp_path) as side:
            async with (
                AgentClient(side.address, token=USER) as client,
                grpc.aio.insecure_channel(side.address) as channel,
            ):
                op, user = _Variants(channel, OPERATOR), _Variants(channel, USER)
                shown = _by_name(await op.list())
                assert [v.name for v in (await op.list()).variants] == ["stable", "canary"]
                assert shown["stable"].stable and not shown["canary"].stable
                assert shown["canary"].state == pb.VARIANT_STATE_IN_ROTATION
                assert shown["canary"].session_share == pytest.approx(0.5)

                # Weights: every new session to the canary.
                after = _by_name(await op.set(reason="ramp", stable=0, canary=3))
                assert after["stable"].state == pb.VARIANT_STATE_IDLE
                assert after["canary"].weight == 3 and after["canary"].configured_weight == 1
                assert after["canary"].session_share == 1
                assert await _new_sessions_go_to(client) == {"canary"}
                figures = _by_name(await op.list())["canary"]
                assert figures.runs >= 6 and figures.failed_runs == 0
                assert figures.HasField("p50") and figures.HasField("p95")

                # Rollback by hand: new sessions to the stable variant, though its weight
                # is 0 (nothing else is in rotation).
                rolled = _by_name(await op.roll_back("canary", reason="bad answers"))
                assert rolled["canary"].state == pb.VARIANT_STATE_ROLLED_BACK
                assert rolled["canary"].rolled_back_reason == "rolled back by op: bad answers"
                assert rolled["stable"].session_share == 1
                assert await _new_sessions_go_to(client, 3) == {"stable"}
                metrics = await scrape(side)
                assert (
                    metrics.get(
                        "agent_sidecar_variant_in_rotation", profile="default", variant="canary"
                    )
                    == 0
                )

                # Promotion puts it back, alone.
                promoted = await op.promote("canary")
                assert promoted.change.action == "promote" and promoted.change.principal == "op"
                shown = _by_name(promoted)
                assert shown["canary"].state == pb.VARIANT_STATE_IN_ROTATION
                assert shown["stable"].weight == 0 and shown["canary"].weight == 3
                assert await _new_sessions_go_to(client, 3) == {"canary"}

                # Reset: the file's weights again.
                reset = await op.reset()
                assert not reset.HasField("change")
                assert {v.name: v.weight for v in reset.variants} == {"stable": 1, "canary": 1}

                # A principal that is not an operator sees and changes nothing.
                code, details = await _refused(user.list())
                assert code == grpc.StatusCode.PERMISSION_DENIED
                assert (
                    details.reason == "PERMISSION_DENIED" and "not an operator" in details.message
                )
                code, _ = await _refused(user.set(stable=1))
                assert code == grpc.StatusCode.PERMISSION_DENIED
                code, details = await _refused(
                    op.stub.ListVariants(pb.ListVariantsRequest(), timeout=10)
                )
                assert code == grpc.StatusCode.UNAUTHENTICATED
        lines = [
            orjson.loads(line) for line in (tmp_path / "audit.jsonl").read_bytes().splitlines()
        ]
        changes = [ln for ln in lines if ln["event"] == "variants_changed"]
        assert [c["action"] for c in changes] == ["set_weights", "roll_back", "promote", "reset"]
        assert all(c["principal"] == "op" and c["profile"] == "default" for c in changes)
        assert changes[0]["weights"] == {"stable": 0, "canary": 3}
        assert changes[0]["reason"] == "ramp"
        assert changes[1]["out_of_rotation"] == {"canary": "rolled back by op: bad answers"}
        refused = [ln for ln in lines if ln["event"] == "call_refused"]
        assert {r["principal"] for r in refused} == {"user"}


async def test_bad_requests_name_the_field_and_change_nothing(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        config = _config(sim, tools, tmp_path)
        config["profiles"]["plain"] = {}
        with sidecar(config, tmp_path) as side:
            async with grpc.aio.insecure_channel(side.address) as channel:
                op = _Variants(channel, OPERATOR)
                cases = [
                    (op.set(canery=2), "weights[canery]", "did you mean 'canary'?"),
                    (op.set(stable=-1), "weights[stable]", "at least 0"),
                    (op.set(stable=float("nan")), "weights[stable]", "finite"),
                    (op.set(stable=0, canary=0), "weights", "no variant would take"),
                    (op.roll_back("stable"), "variant", "cannot be rolled back"),
                    (op.promote("nope"), "variant", "no variant 'nope'"),
                    (op.set(), "weights", "name at least one variant"),
                    (op.roll_back("canary", "x" * 1025), "reason", "at most 1024"),
                ]
                for call, field, words in cases:
                    code, details = await _refused(call)
                    assert code == grpc.StatusCode.INVALID_ARGUMENT, field
                    assert details.reason == "INVALID_REQUEST"
                    [(where, description)] = details.violations
                    assert where == field and words in description, (where, description)
                code, details = await _refused(op.list("nowhere"))
                assert (code, details.reason) == (grpc.StatusCode.NOT_FOUND, "PROFILE_NOT_FOUND")
                code, details = await _refused(op.list("plain"))
                assert details.violations == (
                    ("profile", "profile 'plain' has no variants (profiles.plain.variants)"),
                )
                # Nothing changed, and the sidecar serves on.
                shown = await op.list()
                assert not shown.HasField("change")
                assert [v.weight for v in shown.variants] == [1, 1]


async def test_a_change_survives_a_restart_and_yields_to_a_new_configuration(
    tools: ServerProcess, tmp_path: Path
) -> None:
    log = tmp_path / "sidecar.log"
    with simulator() as sim:
        config = _config(sim, tools, tmp_path)
        config["sessions"] = {"sqlite": {"path": str(tmp_path / "sessions.db")}}
        with sidecar(config, tmp_path) as side:
            async with grpc.aio.insecure_channel(side.address) as channel:
                await _Variants(channel, OPERATOR).set(stable=9, canary=1)
        again = tmp_path / "again"
        with log.open("wb") as stderr, sidecar(config, again, stderr=stderr) as side:
            async with grpc.aio.insecure_channel(side.address) as channel:
                op = _Variants(channel, OPERATOR)
                kept = await op.list()
                assert kept.change.action == "set_weights"
                assert [v.weight for v in kept.variants] == [9, 1]
                # The file changes the profile's variants: it is newer intent.
                path = again / "sidecar.yaml"
                changed = yaml.safe_load(path.read_text())
                changed["profiles"]["default"]["variants"][1]["weight"] = 2
                path.write_text(yaml.safe_dump(changed))
                side.send_signal(signal.SIGHUP)  # or the file watch sees it first

                async def reloaded() -> bool:
                    return "): profiles" in log.read_text()

                await eventually(reloaded, timeout=30)
                now = await op.list()
                assert not now.HasField("change")
                assert [v.weight for v in now.variants] == [1, 2]
    assert "was made against another configuration of its variants" in log.read_text()


async def test_replicas_sharing_a_postgres_store_apply_one_operators_change(
    tools: ServerProcess, tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = await create_database(postgres_server)
    try:
        with simulator() as sim:
            config = _config(sim, tools, tmp_path, sessions={"store": "postgres"})
            config["sessions"]["postgres"] = {"dsn": dsn}
            (tmp_path / "a").mkdir()
            (tmp_path / "b").mkdir()
            with sidecar(config, tmp_path / "a") as a, sidecar(config, tmp_path / "b") as b:
                async with (
                    grpc.aio.insecure_channel(a.address) as to_a,
                    grpc.aio.insecure_channel(b.address) as to_b,
                    AgentClient(b.address, token=USER) as client_b,
                ):
                    await _Variants(to_a, OPERATOR).roll_back("canary", reason="from a")
                    on_b = _Variants(to_b, OPERATOR)

                    async def applied() -> bool:
                        canary = _by_name(await on_b.list())["canary"]
                        return canary.state == pb.VARIANT_STATE_ROLLED_BACK

                    await eventually(applied, timeout=20)
                    assert await _new_sessions_go_to(client_b, 4) == {"stable"}
                    # B builds on A's change: its promotion lifts A's rollback.
                    await on_b.promote("canary")

                    async def promoted() -> bool:
                        shown = await _Variants(to_a, OPERATOR).list()
                        return shown.change.action == "promote"

                    await eventually(promoted, timeout=20)
    finally:
        await drop_database(postgres_server, dsn)


async def test_the_command_lists_and_changes_and_says_why_it_was_refused(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        config = _config(sim, tools, tmp_path)
        with sidecar(config, tmp_path) as side:
            env = {**os.environ, "OP_TOKEN": OPERATOR, "USER_TOKEN": USER}

            def command(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [sys.executable, "-m", "sidecar", "variants", *args],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=60,
                    check=False,
                )

            dial = ["--address", side.address, "--token-env", "OP_TOKEN"]
            done = command("set", *dial, "default", "stable=4", "canary=1", "--reason", "ramp")
            assert done.returncode == 0, done.stderr
            assert "changed by op at" in done.stdout and '(set_weights): "ramp"' in done.stdout
            listed = command("list", *dial)
            assert listed.returncode == 0, listed.stderr
            [stable] = [ln for ln in listed.stdout.splitlines() if "stable (stable)" in ln]
            assert stable.split()[2:7] == ["in", "rotation", "4", "1", "80%"]
            as_json = orjson.loads(command("list", *dial, "default", "--json").stdout)
            [profile] = as_json["profiles"]
            assert [v["weight"] for v in profile["variants"]] == [4, 1]
            refused = command("rollback", *dial, "default", "stable")
            assert refused.returncode == 1
            assert "INVALID_ARGUMENT (INVALID_REQUEST)" in refused.stderr
            assert "cannot be rolled back" in refused.stderr
            as_user = command("list", "--address", side.address, "--token-env", "USER_TOKEN")
            assert as_user.returncode == 1 and "not an operator" in as_user.stderr
            bad = command("set", *dial, "default", "stable")
            assert bad.returncode == 2 and "is not NAME=WEIGHT" in bad.stderr
            remote = command(
                "list", "--address", "sidecar.example:50051", "--token-env", "OP_TOKEN"
            )
            assert remote.returncode == 2 and "only over TLS" in remote.stderr


# -- the control in-process: any sequence of operations leaves a sound state ----------------


def _router() -> dict[str, VariantRouter]:
    variants = [
        Variant(name, 1.0, RunModels(answer=None), {})  # type: ignore[arg-type]
        for name in ("stable", "canary", "third")
    ]
    variants.append(Variant("shadow", 1.0, RunModels(answer=None), {}, shadow=0.5))  # type: ignore[arg-type]
    return {"default": VariantRouter("default", variants, RollbackConfig())}


_PARSED = parse_config(
    {
        "profiles": {
            "default": {
                "variants": [
                    {"name": "stable", "weight": 1},
                    {"name": "canary", "weight": 1},
                    {"name": "third", "weight": 1},
                    {"name": "shadow", "weight": 1, "shadow": 0.5},
                ]
            }
        },
        "recording": {"path": "/tmp/unused"},
    }
)
_NAMES = ["stable", "canary", "third", "shadow", "nope"]
_WEIGHTS = st.one_of(st.floats(-1, 5), st.just(float("nan")))
_OPS = st.one_of(
    st.tuples(
        st.just("set"),
        st.dictionaries(
            st.sampled_from(_NAMES), st.one_of(st.floats(-1, 5), st.just(float("nan"))), max_size=3
        ),
    ),
    st.tuples(st.just("promote"), st.sampled_from(_NAMES)),
    st.tuples(st.just("roll_back"), st.sampled_from(_NAMES)),
    st.tuples(st.just("reset"), st.just("")),
)


@given(st.lists(_OPS, max_size=12), st.booleans())
def test_any_sequence_of_changes_leaves_a_variant_for_new_sessions_and_one_replica_agrees(
    ops: list[tuple[str, Any]], operator: bool
) -> None:
    async def scenario() -> None:
        store = MemorySessionStore()
        routers = _router()
        other = _router()  # a second replica sharing the store
        audit = AuditLog(None)
        control = VariantControl(store, lambda: (routers, _PARSED), audit, _quiet)
        replica = VariantControl(store, lambda: (other, _PARSED), audit, _quiet)
        who = Principal("op", operator=True) if operator else Principal("svc")
        for op, arg in ops:
            try:
                if op == "set":
                    await control.set_weights(who, "default", arg, "")
                elif op == "promote":
                    await control.promote(who, "default", arg, "")
                elif op == "roll_back":
                    await control.roll_back(who, "default", arg, "")
                else:
                    await control.reset(who, "default", "")
            except (InvalidRequest, PermissionDenied) as exc:
                assert operator or isinstance(exc, NotAnOperator)
            router = routers["default"]
            chosen = router.choose(None)
            assert (chosen.shadow is None and chosen.out is None) or chosen is router.stable
            shares = [router.share(v) for v in router.variants.values()]
            assert sum(shares) == pytest.approx(1.0)
            assert all(v.weight >= 0 for v in router.variants.values())
            assert router.variants["shadow"].shadow == 0.5  # never a canary by a change
        await replica._refresh()
        ours = {n: (v.weight, v.out) for n, v in routers["default"].variants.items()}
        theirs = {n: (v.weight, v.out) for n, v in other["default"].variants.items()}
        assert ours == theirs
        assert ANONYMOUS.operator  # without principals every caller may

    asyncio.run(scenario())


def _quiet(profile: str, variant: str, in_rotation: bool) -> None:
    pass
