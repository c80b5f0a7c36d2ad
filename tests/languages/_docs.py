"""The files a doc shows: each fenced block right after a ``<!-- file: NAME -->`` line."""

from __future__ import annotations

import re
from pathlib import Path

from tests.languages._builds import ROOT

_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```[\w-]*\n(.*?)\n```", re.DOTALL)


def files(doc: str, prefix: str) -> dict[str, str]:
    """The blocks of ``docs/DOC`` whose name starts ``PREFIX/``, by the rest of the name."""
    text = (ROOT / "docs" / doc).read_text()
    found = {
        name.removeprefix(prefix + "/"): body + "\n"
        for name, body in _BLOCK.findall(text)
        if name.startswith(prefix + "/")
    }
    assert found, f"docs/{doc} shows no file under {prefix}/"
    return found


def write(directory: Path, shown: dict[str, str], *, skip: tuple[str, ...] = ()) -> None:
    """Writes the shown files (but ``skip``) into ``directory``."""
    for name, body in shown.items():
        if name in skip:
            continue
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
