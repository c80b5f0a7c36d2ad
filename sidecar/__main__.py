"""``python -m sidecar``: the ``agent-sidecar`` command."""

import sys

from sidecar.cli import main

sys.exit(main())
