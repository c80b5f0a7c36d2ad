"""``agent-toolserver NAME [flags]``: run one of the example tool servers."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from toolservers.examples import EXAMPLES


def main(argv: Sequence[str] | None = None) -> None:
    """Run the example named by the first argument with the remaining flags."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in EXAMPLES:
        names = ", ".join(EXAMPLES)
        sys.exit(f"usage: agent-toolserver {{{names}}} [--port PORT] [--latency-ms N] ...")
    importlib.import_module(EXAMPLES[args[0]]).server.run(args[1:])


if __name__ == "__main__":
    main()
