"""What a start loads: the packages of a front, a transport or a feature load only when
the configuration asks for it, so a sidecar that does not use them starts without their
cost (``make bench-startup`` measures it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_SERVE_PATH = "sidecar.commands.serve, sidecar.api.server, sidecar.commands.cli"


def _loaded_after(code: str) -> set[str]:
    script = (
        f"import sys\nimport {_SERVE_PATH}\n{code}\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return set(done.stdout.split())


def test_the_serve_path_loads_no_front_sdk_and_no_openai() -> None:
    loaded = _loaded_after("")
    assert not loaded & {"openai", "mcp", "a2a", "uvicorn", "starlette", "jwt"}, loaded


@pytest.mark.parametrize(
    ("code", "package"),
    [
        (
            "import asyncio, ssl\n"
            "from sidecar.llm.transport import Endpoint, open_transport\n"
            "async def main():\n"
            "    tls = ssl.create_default_context()\n"
            "    endpoint = Endpoint(base_url='http://x/v1', api_key=None, tls=tls)\n"
            "    await open_transport('sdk', endpoint).close()\n"
            "asyncio.run(main())",
            "openai",
        ),
        ("import sidecar.mcp_server", "mcp"),
        ("import sidecar.a2a", "a2a"),
    ],
)
def test_what_a_configuration_asks_for_is_loaded_then(code: str, package: str) -> None:
    assert package in _loaded_after(code)
