"""Print protos/buf.gen.yaml with only the plugins that write under the given directories.

buf runs every plugin of a template, so a step that generates or checks one client hands
buf this selection instead (``buf generate --template "$(python protos/tools/template.py
clients/go)"``): each client needs only its own tools, and the plugins and their options
stay written once, in protos/buf.gen.yaml. Prints JSON, which buf reads as a template.

    python protos/tools/template.py OUT_DIR...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

TEMPLATE = Path(__file__).resolve().parent.parent / "buf.gen.yaml"


def select(template: dict[str, Any], outs: list[str]) -> dict[str, Any]:
    """The template with the plugins whose ``out`` is one of ``outs`` or below one."""
    roots = [out.rstrip("/") for out in outs]
    plugins = [
        plugin
        for plugin in template["plugins"]
        if any(plugin["out"] == root or plugin["out"].startswith(root + "/") for root in roots)
    ]
    if not plugins:
        raise SystemExit(f"no plugin of {TEMPLATE.name} writes under {', '.join(outs)}")
    return {**template, "plugins": plugins}


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    template = yaml.safe_load(TEMPLATE.read_text())
    print(json.dumps(select(template, argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
