"""``agent-toolserver NAME [flags]``: run one of the example tool servers."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from toolservers.examples import EXAMPLES


def main(argv: Sequence[str] | None = None) -> None:
    """Run the example named by the first argument with the remaining flags."""
    args = list(sys.argv[1:] if argv is None else argv)
    names = ", ".join(EXAMPLES)
    usage = (
        f"usage: agent-toolserver {{{names}}} [--port PORT] [--latency-ms N] ...\n"
        "Runs one of the example tool servers; agent-toolserver NAME --help lists its flags."
    )
    if args and args[0] in ("-h", "--help"):
        print(usage)
        return
    if not args or args[0] not in EXAMPLES:
        sys.exit(usage)
    importlib.import_module(EXAMPLES[args[0]]).server.run(args[1:])


if __name__ == "__main__":
    main()
