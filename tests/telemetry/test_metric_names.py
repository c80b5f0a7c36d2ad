"""Every metric the sidecar exports is in the metrics table under the name a scrape shows
(a counter with its ``_total``), and every metric a page names is one it exports."""

from __future__ import annotations

import re
from pathlib import Path

from sidecar.telemetry.metrics import Metrics

DOCS = Path(__file__).resolve().parents[2] / "docs"
_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


def _exported() -> dict[str, str]:
    """Each family's name as a scrape shows it, with its type."""
    names = {}
    for family in Metrics().registry.collect():
        shown = f"{family.name}_total" if family.type == "counter" else family.name
        names[shown] = family.type
    return names


def test_every_exported_metric_is_in_the_metrics_table() -> None:
    table = (DOCS / "observability.md").read_text()
    missing = [name for name in _exported() if f"| `{name}` |" not in table]
    assert not missing, f"not in docs/observability.md's table: {missing}"


def test_every_metric_a_page_names_is_exported() -> None:
    exported = _exported()
    named: set[tuple[str, str]] = set()
    for page in DOCS.glob("*.md"):
        for name in re.findall(r"\bagent_sidecar_[a-z0-9_]+", page.read_text()):
            base = next((name[: -len(s)] for s in _SUFFIXES if name.endswith(s)), name)
            if name not in exported and base not in exported:
                named.add((page.name, name))
    assert not named, f"named but not exported: {sorted(named)}"
