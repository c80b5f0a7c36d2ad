"""No default, example, value or document names a model the provider has retired.

Retired names may appear only where they are the subject: the catalog's retirement
schedule (``sidecar/catalog.py``), the migration note of ``docs/models.md``, and the tests
that check a retired name is refused.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from sidecar.catalog import CATALOG, retired_names

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = ("sidecar/catalog.py", "docs/models.md")
"""Files that name retired models on purpose (tests aside)."""


def _tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [p for p in listed.split("\0") if p]


def test_the_retirement_schedule_names_what_the_provider_shut_down() -> None:
    assert {
        "llama-3.3-70b-versatile",
        "llama-3.1-8b-instant",
        "qwen/qwen3-32b",
        "meta-llama/llama-4-scout-17b-16e-instruct",
    } <= set(retired_names())
    for name in retired_names():
        assert CATALOG[name].retirement is not None


def test_no_default_example_value_or_doc_names_a_retired_model() -> None:
    retired = retired_names()
    found = []
    for path in _tracked():
        if path.startswith("tests/") or path in ALLOWED:
            continue
        file = ROOT / path
        if not file.is_file() or file.stat().st_size > 5_000_000:
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path}:{number}: {name}" for name in retired if name in line]
    assert not found, "retired models named:\n" + "\n".join(found)


def test_the_migration_note_names_each_retired_model_with_its_replacement() -> None:
    note = (ROOT / "docs/models.md").read_text(encoding="utf-8")
    section = note.split("## Moving off a retired model", 1)[1].split("\n## ", 1)[0]
    for name in retired_names():
        retirement = CATALOG[name].retirement
        assert retirement is not None
        assert f"`{name}`" in section and f"`{retirement.replacement}`" in section
