"""``agent-sidecar variants``: a serving sidecar's variants (``VariantService``), seen and
changed from a shell.

``list`` prints each profile's variants with their state, weights and figures; ``set``,
``promote``, ``rollback`` and ``reset`` change them and print the profile after the
change. ``--json`` prints the answer as the proto's JSON mapping, for scripts. A refused
call prints the status, its reason and each invalid field, and exits 1.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import grpc
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration

from agentsidecar.addresses import is_local_target
from agentsidecar.errors import error_details
from agentsidecar.tls import channel_credentials
from agentsidecar.v1 import variants_pb2, variants_pb2_grpc

__all__ = ["Dial", "Request", "parse_weights", "variants"]

_pb = variants_pb2
_STATES = {
    _pb.VARIANT_STATE_IN_ROTATION: "in rotation",
    _pb.VARIANT_STATE_IDLE: "idle (weight 0)",
    _pb.VARIANT_STATE_ROLLED_BACK: "rolled back",
    _pb.VARIANT_STATE_SHADOW: "shadow",
}


@dataclass(frozen=True, slots=True)
class Dial:
    """How to reach the sidecar."""

    address: str
    token: str | None = None
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """What to ask."""

    action: str
    """``list``, ``set``, ``promote``, ``rollback`` or ``reset``."""
    profile: str = ""
    variant: str = ""
    weights: dict[str, float] | None = None
    reason: str = ""


def parse_weights(pairs: Sequence[str]) -> dict[str, float]:
    """``["stable=90", "canary=10"]`` as a mapping.

    Raises:
        ValueError: a pair is not ``NAME=WEIGHT`` with a number.
    """
    weights = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"{pair!r} is not NAME=WEIGHT")
        try:
            weights[name] = float(value)
        except ValueError:
            raise ValueError(f"{pair!r}: the weight {value!r} is not a number") from None
    return weights


async def variants(
    dial: Dial, request: Request, *, as_json: bool = False, out: TextIO = sys.stdout
) -> int:
    """Ask the sidecar, print its answer; the exit code (1: the call was refused)."""
    if dial.token and not dial.tls and not is_local_target(dial.address):
        print(
            "agent-sidecar variants: a token travels only over TLS (--tls), or in plaintext "
            "to loopback",
            file=sys.stderr,
        )
        return 2
    credentials = channel_credentials(
        tls=dial.tls, ca_file=dial.ca_file, cert_file=dial.cert_file, key_file=dial.key_file
    )
    options = [("grpc.ssl_target_name_override", dial.server_name)] if dial.server_name else []
    channel = (
        grpc.aio.insecure_channel(dial.address, options=options)
        if credentials is None
        else grpc.aio.secure_channel(dial.address, credentials, options=options)
    )
    metadata = (("authorization", f"Bearer {dial.token}"),) if dial.token else ()
    async with channel:
        stub = variants_pb2_grpc.VariantServiceStub(channel)
        try:
            answer = await _call(stub, request, metadata)
        except grpc.aio.AioRpcError as exc:
            _refused(exc)
            return 1
    profiles = list(answer.profiles) if request.action == "list" else [answer.profile]
    if as_json:
        print(json_format.MessageToJson(answer, indent=2), file=out)
    elif not profiles:
        print("no profile with variants", file=out)
    else:
        print("\n\n".join(_table(p) for p in profiles), file=out)
    return 0


_CALLS: dict[str, tuple[str, Any]] = {
    "list": ("ListVariants", lambda r: _pb.ListVariantsRequest(profile=r.profile)),
    "set": (
        "SetVariantWeights",
        lambda r: _pb.SetVariantWeightsRequest(
            profile=r.profile, weights=r.weights or {}, reason=r.reason
        ),
    ),
    "promote": (
        "PromoteVariant",
        lambda r: _pb.PromoteVariantRequest(profile=r.profile, variant=r.variant, reason=r.reason),
    ),
    "rollback": (
        "RollBackVariant",
        lambda r: _pb.RollBackVariantRequest(profile=r.profile, variant=r.variant, reason=r.reason),
    ),
    "reset": (
        "ResetVariants",
        lambda r: _pb.ResetVariantsRequest(profile=r.profile, reason=r.reason),
    ),
}
"""Each action: its method of ``VariantService``, and its request."""


async def _call(
    stub: variants_pb2_grpc.VariantServiceStub,
    request: Request,
    metadata: tuple[tuple[str, str], ...],
) -> Any:
    method, build = _CALLS[request.action]
    return await getattr(stub, method)(build(request), timeout=10.0, metadata=metadata)


def _refused(exc: grpc.aio.AioRpcError) -> None:
    details = error_details(exc)
    reason = f" ({details.reason})" if details.reason else ""
    print(
        f"agent-sidecar variants: {details.code.name}{reason}: {details.message}",
        file=sys.stderr,
    )


def _seconds(duration: Duration, present: bool) -> str:
    if not present:
        return "-"
    nanos = duration.ToNanoseconds()
    return f"{nanos / 1e9:.3f} s" if nanos < 10e9 else f"{nanos / 1e9:.1f} s"


def _table(profile: _pb.ProfileVariants) -> str:
    window = profile.window.ToNanoseconds() / 1e9
    lines = [f"profile {profile.profile} (figures of this replica over the last {window:g} s)"]
    if profile.HasField("change"):
        change = profile.change
        when = datetime.datetime.fromtimestamp(
            change.time.ToNanoseconds() / 1e9, datetime.UTC
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
        who = change.principal or "an anonymous caller"
        why = f': "{change.reason}"' if change.reason else ""
        lines.append(f"  changed by {who} at {when} ({change.action}){why}")
    else:
        lines.append("  the configured weights apply")
    rows = [
        ("VARIANT", "STATE", "WEIGHT", "CONFIGURED", "SESSIONS", "RUNS", "FAILED", "P50", "P95")
    ]
    notes = []
    for v in profile.variants:
        name = f"{v.name} (stable)" if v.stable else v.name
        rows.append(
            (
                name,
                _STATES.get(v.state, "?"),
                f"{v.weight:g}",
                f"{v.configured_weight:g}",
                f"{v.session_share:.0%}",
                str(v.runs),
                str(v.failed_runs),
                _seconds(v.p50, v.HasField("p50")),
                _seconds(v.p95, v.HasField("p95")),
            )
        )
        if v.rolled_back_reason:
            notes.append(f"  {v.name}: {v.rolled_back_reason}")
        if v.state == _pb.VARIANT_STATE_SHADOW:
            notes.append(f"  {v.name}: copies {v.shadow_share:.0%} of live turns")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    return "\n".join(lines + notes).rstrip()
