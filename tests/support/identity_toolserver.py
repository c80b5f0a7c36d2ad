"""An SDK tool server whose tools answer with who the call serves (``ctx.identity``).

Run: ``python tests/support/identity_toolserver.py --port 0 --tools whoami,whoami_x
[--record FILE] [the SDK's flags: --identity-keys FILE --require-identity ...]``.
Each tool returns the identity as JSON; ``--record`` appends each call id its handler
ran for, so a test sees that a refused call never reached a handler.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from toolservers import ToolContext, ToolServer


def _server(names: list[str], record: str | None) -> ToolServer:
    server = ToolServer("identity")

    def whoami(ctx: ToolContext) -> dict[str, Any]:  # sync: it writes a file
        identity = ctx.identity
        if record is not None:
            with open(record, "a") as out:
                out.write(identity.call_id + "\n")
        return {
            "principal": identity.principal,
            "session_id": identity.session_id,
            "run_id": identity.run_id,
            "call_id": identity.call_id,
            "request_call_id": ctx.call_id,
            "labels": dict(identity.labels),
            "labels_omitted": identity.labels_omitted,
            "verified": identity.verified,
            "claims": dict(identity.claims),
        }

    for name in names:
        server.add_tool(whoami, name=name, description="Say who the call serves.", read_only=True)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--tools", default="whoami")
    parser.add_argument("--record")
    known, rest = parser.parse_known_args()
    _server(known.tools.split(","), known.record).run(rest)


if __name__ == "__main__":
    sys.exit(main())
