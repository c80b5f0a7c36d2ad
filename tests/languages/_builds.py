"""Where ``make test-languages`` leaves what these tests run, and how to start it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"
GO_CURRENCY = TOOLS / "bin" / "currency-toolserver"
TS_TOOLSERVER = ROOT / "toolservers" / "typescript"
TS_CLIENT = ROOT / "clients" / "typescript"
TS_TAX_EXAMPLE = TS_TOOLSERVER / "build" / "examples" / "tax.js"
JAVA_TOOLSERVER = ROOT / "toolservers" / "java"
JAVA_CLASSPATH = JAVA_TOOLSERVER / "target" / "classpath.txt"
# The Maven repository and the npm cache the make targets use (make passes its own).
M2 = Path(os.environ.get("AGENT_SIDECAR_M2", TOOLS / "m2"))
NPM_CACHE = Path(os.environ.get("AGENT_SIDECAR_NPM_CACHE", TOOLS / "npm-cache"))


def program(name: str) -> str:
    """The path of a program on PATH; fails naming it when it is missing."""
    found = shutil.which(name)
    assert found is not None, f"{name} is needed: `make test-languages` installs or names it"
    return found


def built(path: Path) -> Path:
    """A build output; fails naming the make target when it is missing."""
    assert path.exists(), f"{path} is missing: run `make test-languages`, which builds it"
    return path


def java_classpath() -> str:
    """The Java example server's classpath: its classes and every dependency jar."""
    jars = built(JAVA_CLASSPATH).read_text().strip()
    return f"{built(JAVA_TOOLSERVER / 'target' / 'classes')}:{jars}"


def run(args: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    """Runs a command; fails with its output when it fails."""
    done = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout + done.stderr
