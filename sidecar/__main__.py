"""``python -m sidecar``: the ``agent-sidecar`` command."""

import sys

from sidecar.commands.cli import main

sys.exit(main())
