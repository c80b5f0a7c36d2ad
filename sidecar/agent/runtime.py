"""The runtime: everything a turn needs, built from a validated configuration, with no
front in sight.

:class:`Runtime` builds the model clients (or the embedded LLM simulator), the session
store, the tool-result cache, the memory keeper, the tool catalog and the connections to
the tool servers, telemetry and the audit record, and the :class:`~sidecar.agent.agent.Agent`
every front calls. A front (gRPC, an HTTP gateway, a test) is a page of code around it::

    runtime = Runtime(config, api_key=key)
    await runtime.start()
    await runtime.ready()                  # tool servers discovered (or timed out)
    session = await runtime.agent.create_session(ANONYMOUS, "default", "", {})
    turn = await runtime.agent.begin_turn(ANONYMOUS, session.session_id, "hello")
    outcome = await runtime.agent.run_turn(
        turn, structured=True, sink=None, time_remaining=30, method="Run"
    )
    await runtime.close()

It owns reload: :meth:`Runtime.apply` builds a new :class:`~sidecar.agent.snapshot.Snapshot`
from a new configuration (profiles, variants, prices, principals, tool identity, tool
versions) and swaps it in at once; runs in flight keep the one they were admitted on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from sidecar.agent.agent import Agent
from sidecar.agent.loop import AgentLoop
from sidecar.agent.models import ModelRoster
from sidecar.agent.prices import PriceTable
from sidecar.agent.profiles import LightPath, Profile, build_profiles
from sidecar.agent.replay.recorder import Recorder
from sidecar.agent.snapshot import Snapshot
from sidecar.agent.variant_control import VariantControl
from sidecar.agent.variants import RunModels
from sidecar.config import SidecarConfig, ToolServerConfig, dsn_password
from sidecar.context.assembler import ContextAssembler
from sidecar.context.memory import MemoryKeeper
from sidecar.errors import ConfigError, StartupError
from sidecar.redaction import Redactor
from sidecar.security.audit import AuditLog
from sidecar.security.exposure import check_exposure, check_reload
from sidecar.security.identity import Authenticator
from sidecar.security.tool_identity import ToolIdentity
from sidecar.security.webhooks import callback_secrets
from sidecar.sessions.factory import store_from_config
from sidecar.sessions.store import SessionStore
from sidecar.telemetry import Telemetry
from sidecar.tools.catalog import ToolCatalog
from sidecar.tools.connection import ToolServerConnection
from sidecar.tools.discovery import Discovery
from sidecar.tools.link import ToolLink
from sidecar.tools.result_cache import ResultCache

if TYPE_CHECKING:
    from sidecar.tools.shared_results import PostgresSharedResults

__all__ = ["RELOADABLE", "Runtime", "tool_server_token"]

log = logging.getLogger(__name__)

RELOADABLE = ("profiles", "prices", "auth", "tool_servers")
"""Top-level sections a reload applies: ``auth`` but its audit path, ``tool_servers``
their weights only."""


def tool_server_token(config: ToolServerConfig, environ: Mapping[str, str]) -> str | None:
    """The token the sidecar sends a tool server, from its environment variable or file.

    Raises:
        StartupError: the variable is unset or the file unreadable or empty.
    """
    if config.token_env is not None:
        token = environ.get(config.token_env, "").strip()
        if not token:
            raise StartupError(
                f"tool server {config.name}: the environment variable {config.token_env} "
                "is unset or empty"
            )
        return token
    if config.token_file is not None:
        try:
            token = Path(config.token_file).read_text().strip()
        except OSError as exc:
            raise StartupError(
                f"tool server {config.name}: cannot read {config.token_file}: {exc.strerror}"
            ) from None
        if not token:
            raise StartupError(f"tool server {config.name}: {config.token_file} is empty")
        return token
    return None


def _restart_only_changes(old: SidecarConfig, new: SidecarConfig) -> list[str]:
    """The settings ``new`` changes that only a restart applies."""
    changed = [
        key
        for name in SidecarConfig.model_fields
        if name not in RELOADABLE
        for key in _changed_keys(getattr(old, name), getattr(new, name), name)
    ]
    changed += _changed_keys(old.auth.audit, new.auth.audit, "auth.audit")
    changed += _changed_keys(
        [s.model_copy(update={"weight": 0}) for s in old.tool_servers],
        [s.model_copy(update={"weight": 0}) for s in new.tool_servers],
        "tool_servers",
    )
    return changed


def _changed_keys(old: Any, new: Any, where: str) -> list[str]:
    """The keys under ``where`` whose values differ (``server.port``,
    ``tool_servers[1].address``): the whole ``where`` when a list changes length or a
    value changes kind."""
    if old == new:
        return []
    if isinstance(old, BaseModel) and type(old) is type(new):
        return [
            key
            for name in type(old).model_fields
            for key in _changed_keys(getattr(old, name), getattr(new, name), f"{where}.{name}")
        ]
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            key
            for name in sorted({*old, *new}, key=str)
            for key in _changed_keys(old.get(name), new.get(name), f"{where}.{name}")
        ]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            key
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for key in _changed_keys(a, b, f"{where}[{i}]")
        ]
    return [where]


def _tool_versions(config: SidecarConfig) -> dict[str, list[tuple[str, float]]]:
    """Each tool server that has versions: itself and its versions, with their weights."""
    versions: dict[str, list[tuple[str, float]]] = {}
    by_name = {s.name: s for s in config.tool_servers}
    for server in config.tool_servers:
        if server.version_of is not None:
            original = by_name[server.version_of]
            versions.setdefault(original.name, [(original.name, original.weight)])
            versions[original.name].append((server.name, server.weight))
    return versions


class Runtime:
    """Everything one sidecar process runs turns with, built from one configuration.

    Args:
        config: The validated configuration.
        api_key: The model's API key (the command reads it from the environment).
        postgres_dsn: The shared store's connection string, when it uses one.
        redactor: Redacts secrets; unset: one made of the key, the store's password and
            the configured patterns.
        environ: The environment variables the configuration names for secrets.

    Raises:
        StartupError: a token or TLS file cannot be read, or a token variable is unset.
    """

    def __init__(
        self,
        config: SidecarConfig,
        *,
        api_key: str | None,
        postgres_dsn: str | None = None,
        redactor: Redactor | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._environ = environ or {}
        self._postgres_dsn = postgres_dsn
        self.redact = redactor or Redactor(
            [api_key, dsn_password(postgres_dsn)], config.security.redact
        )
        self.telemetry = Telemetry.from_config(config)
        metrics = self.telemetry.metrics
        self.audit = AuditLog(config.auth.audit.path, self.redact)
        self.models = ModelRoster(
            config.model,
            api_key=api_key,
            environ=self._environ,
            redact=self.redact,
            on_error=self.telemetry.model_error_hook,
        )
        self.catalog = ToolCatalog()
        self.catalog.set_server_order(
            [s.name for s in config.tool_servers] + [s.name for s in config.mcp_servers]
        )
        discovery = Discovery(
            self.catalog,
            {s.name: s.version_of for s in config.tool_servers if s.version_of},
            on_change=self._catalog_changed,
        )
        on_breaker_change = metrics.breaker_changed if metrics is not None else None
        self.connections: dict[str, ToolLink] = {
            s.name: ToolServerConnection(
                s,
                on_discovered=discovery.discovered,
                on_breaker_change=on_breaker_change,
                token=tool_server_token(s, self._environ),
            )
            for s in config.tool_servers
        }
        if config.mcp_servers:
            # The SDK is imported only when an MCP server is configured.
            from sidecar.tools.mcp import McpServerConnection

            for m in config.mcp_servers:
                self.connections[m.name] = McpServerConnection(
                    m,
                    on_discovered=discovery.discovered,
                    on_breaker_change=on_breaker_change,
                    environ=self._environ,
                )
        if metrics is not None:
            for name in self.connections:
                metrics.breaker_known(name)
        self._config = config
        self._snapshot: Snapshot | None = None
        self.store: SessionStore | None = None
        self.variants: VariantControl | None = None
        """The operator's hand on the profiles' variants."""
        self.results: ResultCache | None = None
        self.memory: MemoryKeeper | None = None
        self._shared_results: PostgresSharedResults | None = None
        self._agent: Agent | None = None
        self.loop: AgentLoop | None = None
        self.recorder: Recorder | None = None
        self.metrics_port: int | None = None
        self.is_ready = False
        """Every tool server discovered, or its discovery timed out."""
        self.became_ready = asyncio.Event()
        """Set once :attr:`is_ready`: what a front that must not answer before the tools
        are known waits for."""
        self._catalog_listeners: list[Callable[[], None]] = []
        self._unknown_tools: dict[str, frozenset[str]] = {}
        self._over_cap: dict[str, int] = {}  # tools each profile allows, when logged

    # -- what fronts read ------------------------------------------------------------------

    @property
    def config(self) -> SidecarConfig:
        """The configuration applied last."""
        return self._config

    @property
    def snapshot(self) -> Snapshot:
        """The configuration applied last, as runs admitted now read it."""
        assert self._snapshot is not None, "Runtime.start() first"
        return self._snapshot

    @property
    def agent(self) -> Agent:
        """Sessions, turns and approvals: what every front calls."""
        assert self._agent is not None, "Runtime.start() first"
        return self._agent

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Build what runs turns and connect to the tool servers (discovery goes on in
        the background: :meth:`ready`).

        Raises:
            SessionStoreError: the session store cannot be opened.
            StartupError: the configuration exposes the sidecar and does not say
                ``insecure``, a model's key is missing, or a file cannot be read.
        """
        config = self._config
        for warning in check_exposure(config):
            log.warning("%s", warning)
        model = await self.models.start()
        await self.check_models(config)
        store = store_from_config(
            config.sessions,
            postgres_dsn=self._postgres_dsn,
            retention=config.background.retention,
        )
        await store.open()
        self.store = store
        self.variants = VariantControl(
            store,
            lambda: (self.snapshot.routers, self._config),
            self.audit,
            self.telemetry.variant_state,
        )
        await self.variants.load()
        shared = None
        if config.cache.shared:
            from sidecar.sessions.postgres import PostgresSessionStore
            from sidecar.tools.shared_results import PostgresSharedResults

            assert isinstance(store, PostgresSessionStore)
            shared = PostgresSharedResults(
                store.pool, sweep_interval=config.sessions.sweep_interval
            )
            await shared.open()
            self._shared_results = shared
        if config.cache.tool_results:
            self.results = ResultCache(max_entries=config.cache.max_entries, shared=shared)
        if any(p.context.memory for p in config.profiles.values()):
            self.memory = MemoryKeeper(model, store, timeout=config.model.timeout)
        loop = AgentLoop(
            self.catalog,
            self.connections,
            results=self.results,
            redact=self.redact,
            max_message_bytes=config.server.max_message_bytes,
        )
        self.loop = loop
        if config.recording.path is not None:
            self.recorder = Recorder(
                config.recording,
                redact=self.redact,
                loop=loop,
                telemetry=self.telemetry,
                replay=config.replay,
            )
        self._snapshot = self._build_snapshot(config, previous=None)
        self.variants.start()
        self._agent = Agent(
            loop,
            store,
            snapshot=lambda: self.snapshot,
            model=model,
            telemetry=self.telemetry,
            audit=self.audit,
            max_response_bytes=config.server.max_message_bytes,
            max_runs=config.server.max_concurrent_runs,
            light_path=config.server.light_path,
            max_sessions=config.sessions.max_sessions,
            background=config.background,
            recorder=self.recorder,
        )
        self._agent.speculation.start()
        if self.telemetry.metrics is not None:
            metrics = config.telemetry.metrics
            self.metrics_port = self.telemetry.metrics.serve(
                metrics.host,
                metrics.port,
                read_timeout=metrics.read_timeout,
                max_connections=metrics.max_connections,
            )
        for connection in self.connections.values():
            connection.start()

    async def ready(self) -> None:
        """Wait until every tool server is discovered or its discovery timeout has passed
        (its tools stay hidden until it answers); then check the profiles' tool lists."""

        async def discovered(connection: ToolLink) -> None:
            try:
                async with asyncio.timeout(connection.config.discovery_timeout):
                    await connection.discovered.wait()
            except TimeoutError:
                log.warning(
                    "tool server %s (%s) not discovered within %.1fs%s; its tools stay hidden "
                    "until it answers",
                    connection.name,
                    connection.where,
                    connection.config.discovery_timeout,
                    f": {connection.last_error}" if connection.last_error else "",
                )

        await asyncio.gather(*(discovered(c) for c in self.connections.values()))
        self.is_ready = True
        self._check_profile_tools()
        self.became_ready.set()

    def on_catalog_change(self, listener: Callable[[], None]) -> None:
        """Have ``listener`` told after each change of the tool catalog once ready (a
        server discovered again, an MCP server's ``list_changed``)."""
        self._catalog_listeners.append(listener)

    async def close(self) -> None:
        """Release everything: runs still storing their turns get 5 s first."""
        if self._agent is not None:
            await self._agent.runs.close()
            try:
                async with asyncio.timeout(5):
                    await self._agent.wait_idle()
            except TimeoutError:
                log.warning("runs still storing their turns after 5s; closing the store")
        if self._agent is not None:
            await self._agent.speculation.close()
        if self.recorder is not None:
            await self.recorder.close()
        if self.memory is not None:
            await self.memory.close()
        if self.results is not None:
            await self.results.close()
        if self._shared_results is not None:
            await self._shared_results.close()
        if self.variants is not None:
            await self.variants.stop()
        if self.store is not None:
            await self.store.close()
        for connection in self.connections.values():
            await connection.close()
        await self.models.close()
        await self.telemetry.close()
        self.audit.close()

    async def check_models(self, config: SidecarConfig) -> None:
        """Refuse ``config`` when a model section names a model its endpoint does not
        serve (the endpoint's ``GET /models``); log the retirement schedule's warnings.

        Raises:
            StartupError: naming each such model, its replacement and the closest served.
        """
        problems = await self.models.check_served(config)
        if problems:
            raise StartupError("; ".join(problems))

    # -- reload ----------------------------------------------------------------------------

    def apply(self, config: SidecarConfig) -> list[str]:
        """Apply ``config`` to the runs that start from now on: a new snapshot, swapped in
        at once; runs in flight finish on the one they started with. Profiles (prompts,
        tool lists, budgets, variants and their weights, tiering), prices, principals, the
        tool identity and tool-server weights reload; every other section needs a restart.

        Returns:
            The top-level sections that changed.

        Raises:
            ConfigError: the new configuration changes a section that needs a restart,
                or switches caller authentication off; nothing was applied.
            StartupError: a model it names cannot be used (an unset key), a token file
                or the signing key of ``auth.tool_assertion`` cannot be read, or it fails
                the start-time exposure check; nothing was applied.
        """
        old = self._config
        restart = _restart_only_changes(old, config)
        if restart:
            raise ConfigError("these settings take effect only at a restart: " + ", ".join(restart))
        for warning in check_reload(old, config):
            log.warning("%s", warning)
        changed = [s for s in RELOADABLE if getattr(old, s) != getattr(config, s)]
        if not changed:
            return []
        snapshot = self._build_snapshot(
            config, previous=self.snapshot
        )  # may raise: nothing changed
        self._snapshot, self._config = snapshot, config
        self.agent.speculation.start()  # a profile may speculate now
        if self.is_ready:
            self._check_profile_tools()
        return changed

    def _build_snapshot(self, config: SidecarConfig, previous: Snapshot | None) -> Snapshot:
        """Everything a reload replaces, built from ``config`` (an error builds nothing)."""
        routers = self.models.routers(
            config,
            previous=(previous.config, previous.routers) if previous is not None else None,
            on_rollback=self._rolled_back,
            on_state=self.telemetry.variant_state,
        )
        if self.variants is not None:
            self.variants.apply(routers, config)  # the operators' changes over the file
        authenticator = Authenticator(config.auth, self._environ)
        if (
            previous is not None
            and config.auth.tool_assertion == previous.config.auth.tool_assertion
        ):
            tool_identity = previous.tool_identity
        else:
            tool_identity = ToolIdentity.from_config(config.auth.tool_assertion)
        context = ContextAssembler(config.profiles, self.memory, self.models.memory_models(config))
        simulated = self.models.simulated
        prices = PriceTable(
            config.prices,
            # The embedded simulator's runs are priced as the configured model would
            # charge for their tokens, and say so.
            priced_as=config.model.model if simulated else None,
            simulated=simulated,
        )
        light = {}
        for name, profile in config.profiles.items():
            light_profile = profile.light_profile()
            if profile.light is not None and light_profile is not None:
                model = self.models.model_for(profile.light.model)
                light[name] = LightPath(Profile.build(name, light_profile), RunModels(model))
        return Snapshot(
            config=config,
            profiles=build_profiles(config.profiles),
            light=light,
            routers=routers,
            context=context,
            prices=prices,
            authenticator=authenticator,
            tool_identity=tool_identity,
            tool_versions=_tool_versions(config),
            callback_secrets=callback_secrets(config, self._environ),
        )

    # -- tool servers ----------------------------------------------------------------------

    def _catalog_changed(self) -> None:
        if self.is_ready:
            self._check_profile_tools()
            for listener in self._catalog_listeners:
                listener()

    def _check_profile_tools(self) -> None:
        """Warn about (and count) names in profiles' tool lists that no tool server
        offers: a typo there silently leaves the model without the tool."""
        reported: dict[str, frozenset[str]] = {}
        cap = self._config.model.max_tools_per_request
        for name, profile in self._config.profiles.items():
            allowed = frozenset(profile.tools) if profile.tools is not None else None
            count = len(self.catalog.definitions(name, allowed, frozenset()))
            if count > cap and count != self._over_cap.get(name):
                log.error(
                    "profile %s allows %d tools, more than one model request may carry "
                    "(model.max_tools_per_request: %d): its runs fail with "
                    "model_too_many_tools until its tools list names fewer",
                    name,
                    count,
                    cap,
                )
            self._over_cap[name] = count
            unknown = frozenset(self.catalog.unknown(profile.tools or []))
            self.telemetry.unknown_tools(name, len(unknown))
            fresh = unknown - self._unknown_tools.get(name, frozenset())
            if fresh:
                log.warning(
                    "profile %s names tools no tool server offers: %s; the model does not "
                    "get them (a typo, or a server that is down?)",
                    name,
                    ", ".join(f"{t}{self.catalog.spelt_like(t)}" for t in sorted(fresh)),
                )
            reported[name] = unknown
        self._unknown_tools = reported

    def _rolled_back(self, profile: str, variant: str, why: str) -> None:
        self.telemetry.variant_rolled_back(profile, variant)
        self.audit.record("variant_rolled_back", "", profile=profile, variant=variant, why=why)
