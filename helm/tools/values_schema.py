"""Keep the chart's values.schema.json in step with the sidecar's configuration.

The chart's own values are described by hand in ``helm/agent-sidecar/values.schema.json``.
Its ``config`` value is the sidecar's configuration file, so its schema is generated from
the configuration model itself (``sidecar.config.SidecarConfig``): a key the sidecar
does not know, or a value it would refuse, fails ``helm install`` before a pod starts,
with the same rules the sidecar applies (unknown keys refused). The keys the chart sets
itself are taken out of it, so setting them under ``config`` is refused too.

    python helm/tools/values_schema.py          # rewrite the generated part
    python helm/tools/values_schema.py --check  # fail when it is stale
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

from sidecar.config import SidecarConfig

SCHEMA = Path(__file__).resolve().parents[1] / "agent-sidecar" / "values.schema.json"
PREFIX = "config."
"""Generated definitions are named ``config.NAME`` among the schema's ``$defs``."""
OWNED = {
    "SidecarConfig": ("auth",),
    "ServerConfig": ("host", "port", "tls", "insecure", "health_port", "unix_socket"),
    "SqliteConfig": ("path",),
    "TelemetryConfig": ("metrics",),
    "McpEndpointConfig": ("host", "port"),
    "A2AHttpConfig": ("host", "port"),
}
"""Keys the chart renders itself (from ``port``, ``tls``, ``healthPort``, ``auth``, the
data volume, ``socket``, ``metrics``, ``mcp`` and ``a2aHttp``)."""
DROPPED = {"MetricsConfig", "ServerTlsConfig", "AuthConfig", "AuditConfig", "PrincipalConfig"}
"""Definitions only the owned keys used."""
CHART_PRINCIPAL = {
    "token": {
        "type": "boolean",
        "description": "Authenticate with a bearer token from auth.existingSecret (default "
        "true); false: by its certificate's san only.",
    },
    "tokenKey": {
        "type": "string",
        "description": "The key of auth.existingSecret holding its token; default: its name.",
        "pattern": "^[-._a-zA-Z0-9]+$",
    },
}
"""What a chart principal has instead of the configuration's token sources."""
NOISE = ("title", "default")
"""Pydantic's titles repeat the key; defaults are in docs/configuration.md."""


def generated() -> tuple[dict[str, Any], dict[str, Any]]:
    """The schema of ``config`` and the definitions it refers to."""
    raw = SidecarConfig.model_json_schema(ref_template="#/$defs/" + PREFIX + "{model}")
    defs = raw.pop("$defs")
    # An entry of auth.principals: the chart renders its token_file from the Secret.
    principal = copy.deepcopy(defs["PrincipalConfig"])
    for key in ("token_sha256", "token_env", "token_file"):
        principal["properties"].pop(key)
    principal["properties"].update(CHART_PRINCIPAL)
    principal["description"] = (
        "One caller: a token from auth.existingSecret, or its certificate's san, or both."
    )
    defs["ChartPrincipal"] = principal
    for name, keys in OWNED.items():
        for key in keys:
            (raw if name == "SidecarConfig" else defs[name])["properties"].pop(key)
    for name in DROPPED:
        defs.pop(name)
    # A chart tool server's entry: the chart sets its name and address.
    options = copy.deepcopy(defs["ToolServerConfig"])
    for key in ("name", "address"):
        options["properties"].pop(key)
    options.pop("required", None)
    options["description"] = (
        "More of a chart tool server's tool_servers entry; the chart sets name and address."
    )
    defs["ToolServerOptions"] = options
    top = _clean(raw)
    top["description"] = (
        "The sidecar's configuration file (docs/configuration.md), less the keys the "
        "chart sets: server.host, server.port, server.tls, server.insecure, "
        "server.health_port, server.unix_socket, auth, sessions.sqlite.path, "
        "telemetry.metrics."
    )
    return top, {PREFIX + name: _clean(body) for name, body in sorted(defs.items())}


def _clean(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _clean(v) for k, v in node.items() if k not in NOISE}
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def render(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its generated part replaced."""
    top, defs = generated()
    out = copy.deepcopy(schema)
    out["properties"]["config"] = top
    kept = {k: v for k, v in out.get("$defs", {}).items() if not k.startswith(PREFIX)}
    out["$defs"] = {**kept, **defs}
    return out


def dump(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when the file is stale")
    args = parser.parse_args()
    current = SCHEMA.read_text(encoding="utf-8")
    wanted = dump(render(json.loads(current)))
    if args.check:
        if current != wanted:
            print(
                f"{SCHEMA} is stale against sidecar/config/: run 'make gen-helm' and commit",
                file=sys.stderr,
            )
            return 1
        return 0
    SCHEMA.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
