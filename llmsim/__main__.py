"""``python -m llmsim``: the LLM simulator."""

import sys

from llmsim._cli import main

sys.exit(main())
