"""``agent-sidecar serve``: one process, from start to drain.

:func:`serve` builds the :class:`~sidecar.agent.runtime.Runtime`, puts the gRPC front (and,
with ``mcp.port``, the MCP front) in front of it, reloads the configuration file on SIGHUP
and when it changes (:class:`ConfigReloader`), and on SIGTERM or SIGINT drains the fronts
and closes the runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from sidecar.agent.runtime import Runtime
from sidecar.api.server import GrpcFront
from sidecar.config import SidecarConfig
from sidecar.errors import ConfigError, StartupError
from sidecar.redaction import Redactor

__all__ = ["ConfigReloader", "serve"]

log = logging.getLogger(__name__)


class ConfigReloader:
    """Reloads the sidecar's configuration file on SIGHUP and when the file changes.

    A file is applied only whole and valid: it is read in one piece, validated, checked
    as start checks it (and as only a reload needs: authentication is not switched off),
    and applied at once, or not at all. The watcher applies a change only once the file
    has stayed the same for a whole interval, and after reading it, only if it did not
    change meanwhile: a writer that truncates, pauses and finishes is never caught half
    way. An empty file is never applied. A reload that fails in any way changes nothing:
    the sidecar logs why, audits it, counts it, and goes on as it was; the watcher keeps
    watching whatever happens.

    Args:
        runtime: What the configuration is applied to (its ``apply``, its audit record
            and telemetry).
        path: The configuration file.
        read: Reads the file as the command did (with its flags applied).
    """

    def __init__(self, runtime: Runtime, path: Path, read: Callable[[], SidecarConfig]) -> None:
        self._runtime = runtime
        self._path = path
        self._read = read
        self._seen = self._stamp()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def _stamp(self) -> tuple[float, int, int] | None:
        try:
            stat = self._path.stat()
        except OSError:
            return None
        return (stat.st_mtime, stat.st_size, stat.st_ino)

    def watch(self, interval: float) -> None:
        """Check the file every ``interval`` seconds in the background."""
        self._task = asyncio.get_running_loop().create_task(
            self._watch(interval), name="config-watch"
        )

    async def _watch(self, interval: float) -> None:
        settling: tuple[float, int, int] | None = None
        while True:
            await asyncio.sleep(interval)
            stamp = self._stamp()
            if stamp is None or stamp == self._seen:
                settling = None
                continue
            if stamp != settling:
                settling = stamp  # changed since the last look: let the writer finish
                continue
            settling = None
            await self.reload("the file changed")

    async def reload(self, why: str) -> bool:
        """Reload now; True when the new configuration was applied. Never raises."""
        async with self._lock:
            runtime = self._runtime
            before = self._stamp()
            try:
                if before is not None and before[1] == 0:
                    raise ConfigError(f"{self._path} is empty")
                config = self._read()
                if self._stamp() != before:
                    # Written to while it was read: the next look reads it whole.
                    log.info("configuration not reloaded (%s): the file changed while read", why)
                    return False
                self._seen = before
                await runtime.check_models(config)
                changed = runtime.apply(config)
            except (ConfigError, StartupError) as exc:
                self._seen = before
                log.error("configuration not reloaded (%s): %s", why, exc)
                runtime.audit.record("config_reload_refused", "", why=why, message=str(exc))
                runtime.telemetry.config_reloaded(False)
                return False
            except Exception as exc:
                # A bug: said loudly, and the sidecar goes on with what it had.
                self._seen = before
                error_id = uuid.uuid4().hex[:16]
                log.exception("configuration not reloaded (%s): internal error %s", why, error_id)
                runtime.audit.record(
                    "config_reload_refused",
                    "",
                    why=why,
                    message=f"internal error {error_id} ({type(exc).__name__})",
                )
                runtime.telemetry.config_reloaded(False)
                return False
            if changed:
                # Loud by default: what the sidecar does just changed.
                log.warning("configuration reloaded (%s): %s", why, ", ".join(changed))
                runtime.audit.record("config_reloaded", "", why=why, sections=changed)
            else:
                log.info("configuration reloaded (%s): nothing changed", why)
            runtime.telemetry.config_reloaded(True)
            return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def serve(
    config: SidecarConfig,
    *,
    api_key: str | None,
    postgres_dsn: str | None = None,
    redactor: Redactor | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: str | None = None,
    reread: Callable[[], SidecarConfig] | None = None,
) -> None:
    """Run the sidecar until SIGTERM or SIGINT, then drain and return.

    Args:
        config: The validated configuration.
        api_key: The model's API key (read from the environment by the command).
        postgres_dsn: The shared store's connection string, when it uses one.
        redactor: Redacts secrets; unset: one made of the key, the store's password and
            the configured patterns.
        environ: The environment variables the configuration names for tokens.
        config_path: The file ``config`` came from: reloaded on SIGHUP and when it
            changes (``server.config_watch_interval``), with ``reread``.
        reread: Reads the file again as the command did (with its flags applied).

    Raises:
        StartupError: the runtime or the front cannot start (a message says why).
    """
    runtime = Runtime(
        config, api_key=api_key, postgres_dsn=postgres_dsn, redactor=redactor, environ=environ
    )
    mcp_front = None
    a2a = None
    if config.a2a is not None:
        # Imported only when configured: a sidecar without A2A loads none of its SDK.
        from sidecar.a2a import A2AFront

        a2a = A2AFront(runtime)
    serve_grpc = a2a is not None and config.a2a is not None and config.a2a.grpc
    front = GrpcFront(runtime, services=[a2a] if a2a is not None and serve_grpc else ())
    try:
        await runtime.start()
        port = await front.start()
        if a2a is not None:
            await a2a.start(port)
    except BaseException:
        if front.port:
            await front.stop(0)
        await runtime.close()
        raise
    if config.mcp.port is not None:
        # The SDK's server side is imported only when the endpoint is configured.
        from sidecar.mcp_server import McpFront

        mcp_front = McpFront(runtime)
        try:
            await mcp_front.start()
        except BaseException:
            if a2a is not None:
                await a2a.stop()
            await front.stop(0)
            await runtime.close()
            raise
    # Start-up objects (modules, clients, schemas) live as long as the process; left in
    # sight of the collector, every full collection walks them all, a pause paid by the
    # requests in flight. Frozen, a collection walks only what requests allocate.
    gc.collect()
    gc.freeze()
    # Signals are handled before the sidecar says it listens: a supervisor may signal the
    # moment it reads that line, and the drain must be in place by then.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reloader = None
    if config_path is not None and reread is not None:
        reloader = ConfigReloader(runtime, Path(config_path), reread)
        pending: set[asyncio.Task[bool]] = set()

        def on_hangup() -> None:
            task = loop.create_task(reloader.reload("SIGHUP"))
            pending.add(task)
            task.add_done_callback(pending.discard)

        loop.add_signal_handler(signal.SIGHUP, on_hangup)
        if config.server.config_watch_interval is not None:
            reloader.watch(config.server.config_watch_interval)
    if runtime.metrics_port is not None:
        print(f"metrics on {config.telemetry.metrics.host}:{runtime.metrics_port}", flush=True)
    if front.health_port is not None:
        print(f"health on {config.server.host}:{front.health_port}", flush=True)
    if config.server.unix_socket is not None:
        print(f"socket on unix:{config.server.unix_socket}", flush=True)
    if mcp_front is not None:
        print(f"mcp on {mcp_front.url}", flush=True)
    if a2a is not None and a2a.http_port is not None:
        assert config.a2a is not None and config.a2a.http is not None
        print(
            f"a2a http on {config.a2a.http.host or config.server.host}:{a2a.http_port}", flush=True
        )
    print(f"listening on {config.server.host}:{port}", flush=True)
    await stop.wait()
    if reloader is not None:
        await reloader.close()
    log.info("draining (grace %.1fs)", config.server.grace_period)
    if a2a is not None:
        await a2a.stop()
    stops = [front.stop(config.server.grace_period)]
    if mcp_front is not None:
        stops.append(mcp_front.stop())
    await asyncio.gather(*stops)
    await runtime.close()
    log.info("stopped")
