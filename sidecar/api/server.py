"""The sidecar daemon: model, tool servers, ``AgentService``, health and reflection.

Health (``grpc.health.v1``, the empty name and ``agentsidecar.v1.AgentService``) says
NOT_SERVING until every configured tool server has been discovered (or its discovery
timeout has passed, in which case its tools stay hidden until it appears), and again from
the moment SIGTERM starts the drain. Draining refuses new runs and gives in-flight runs
the configured grace period to finish.

Security (docs/security.md): the port serves TLS with ``server.tls`` (mutual TLS with a
client CA); every ``AgentService`` call is authenticated when ``auth.principals`` is set
(health and reflection stay open); the audit record is written when ``auth.audit.path``
is set. A configuration that exposes plaintext or anonymous access beyond loopback does
not start without ``server.insecure``.

With ``server.unix_socket`` the same server (its services, TLS and callers) also listens
on a Unix domain socket: grpc binds ``unix:PATH`` next to the TCP port. grpc itself would
replace any socket at the path, one a live sidecar serves included, so the sidecar first
checks that nothing answers there.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentsidecar.addresses import SOCKET_MODE, UnixSocketError, claim_unix_socket, socket_umask
from agentsidecar.reflection import enable_reflection
from agentsidecar.v1 import agent_pb2, tool_pb2
from sidecar.agent.agent import Agent
from sidecar.agent.cost import PriceTable
from sidecar.agent.loop import AgentLoop
from sidecar.agent.variants import RunModels, Variant, VariantRouter
from sidecar.api.service import AgentServicer, add_to_server
from sidecar.config import (
    GROQ_BASE_URL,
    ModelConfig,
    ProfileConfig,
    SidecarConfig,
    ToolServerConfig,
    dsn_password,
    resolve_model,
)
from sidecar.context.assembler import ContextAssembler
from sidecar.context.memory import MemoryKeeper
from sidecar.errors import ConfigError, StartupError
from sidecar.llm.model import Model
from sidecar.llm.openai_model import OpenAICompatibleModel
from sidecar.redaction import Redactor
from sidecar.security.audit import AuditLog
from sidecar.security.exposure import check_exposure, check_reload
from sidecar.security.identity import Authenticator
from sidecar.security.tls import server_credentials
from sidecar.security.tool_identity import ToolIdentity
from sidecar.sessions.factory import store_from_config
from sidecar.sessions.store import SessionStore
from sidecar.telemetry import Telemetry
from sidecar.tools.catalog import ToolCatalog
from sidecar.tools.connection import ToolServerConnection
from sidecar.tools.result_cache import ResultCache

if TYPE_CHECKING:
    from sidecar.tools.shared_results import PostgresSharedResults

log = logging.getLogger(__name__)

SERVICE_NAME = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
# After the drain's last refusal, how long no further call may arrive before the server
# stops (see Agent.wait_refusals_settled).
_REFUSALS_QUIET = 0.25


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


_RELOADABLE = ("profiles", "prices", "auth", "tool_servers")
"""Top-level sections a reload applies: ``auth`` but its audit path, ``tool_servers``
their weights only."""


def _restart_only_changes(old: SidecarConfig, new: SidecarConfig) -> list[str]:
    """The settings ``new`` changes that only a restart applies."""
    changed = [
        name
        for name in SidecarConfig.model_fields
        if name not in _RELOADABLE and getattr(old, name) != getattr(new, name)
    ]
    if old.auth.audit != new.auth.audit:
        changed.append("auth.audit")
    if [s.model_copy(update={"weight": 0}) for s in old.tool_servers] != [
        s.model_copy(update={"weight": 0}) for s in new.tool_servers
    ]:
        changed.append("tool_servers (other than their weights)")
    return changed


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


class Sidecar:
    """Everything one sidecar process runs, started and stopped as a unit.

    Raises:
        StartupError: a token, TLS or signing-key file cannot be read, or a token variable
            is unset.
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
        environ = environ or {}
        self._environ = environ
        self.config = config
        self._api_key = api_key
        self.redact = redactor or Redactor(
            [api_key, dsn_password(postgres_dsn)], config.security.redact
        )
        self.telemetry = Telemetry.from_config(config)
        metrics = self.telemetry.metrics
        self._postgres_dsn = postgres_dsn
        self.store: SessionStore | None = None
        self.results: ResultCache | None = None
        self.memory: MemoryKeeper | None = None
        self._shared_results: PostgresSharedResults | None = None
        self.catalog = ToolCatalog()
        self._catalog_lock = asyncio.Lock()
        self._version_of = {s.name: s.version_of for s in config.tool_servers if s.version_of}
        self.catalog.set_server_order([s.name for s in config.tool_servers])
        self.connections = {
            s.name: ToolServerConnection(
                s,
                on_discovered=self._discovered,
                on_breaker_change=metrics.breaker_changed if metrics is not None else None,
                token=tool_server_token(s, environ),
            )
            for s in config.tool_servers
        }
        self.authenticator = Authenticator(config.auth, environ)
        self.tool_identity = ToolIdentity.from_config(config.auth.tool_assertion)
        self.audit = AuditLog(config.auth.audit.path, self.redact)
        self._health_server: grpc.aio.Server | None = None
        self.health_port: int | None = None
        if metrics is not None:
            for s in config.tool_servers:
                metrics.breaker_known(s.name)
        self.metrics_port: int | None = None
        self.health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._simulator: object | None = None
        self._simulator_url: str | None = None  # the built-in simulator's, when it runs
        self._model: Model | None = None
        self._models: dict[str, Model] = {}  # by resolved model section, each built once
        self._base_url = ""
        self.port = 0
        self._ready_task: asyncio.Task[None] | None = None
        self._servicer: AgentServicer | None = None
        self.agent: Agent | None = None
        self._ready = False  # every tool server discovered, or its discovery timed out
        self._unknown_tools: dict[str, frozenset[str]] = {}

    async def _discovered(self, server: str, response: tool_pb2.ListToolsResponse) -> None:
        version_of = self._version_of.get(server)
        if version_of is not None:
            # A version serves its original's tools under their names: it adds none.
            log.info(
                "tool server %s (a version of %s): %d tools",
                server,
                version_of,
                len(response.tools),
            )
            return
        # Schemas compile off the event loop (bounded in size, no remote references),
        # one server's list at a time.
        async with self._catalog_lock:
            changed = await asyncio.to_thread(self.catalog.update, server, response)
        if changed:
            log.info("tool server %s: %d tools", server, len(response.tools))
            if self._ready:
                self._check_profile_tools()

    async def _start_model(self) -> Model:
        """The model client: the configured endpoint, or the embedded simulator.

        Raises:
            StartupError: an endpoint is configured but its key is not set (and the
                endpoint is not declared keyless), or the simulator is needed and missing.
        """
        model = self.config.model
        base_url = model.base_url
        api_key = self._api_key
        keyless = model.keyless
        if base_url is not None and api_key is None and not keyless:
            raise StartupError(
                f"model.base_url is {base_url} but the environment variable "
                f"{model.api_key_env} is unset or empty: set it, or set model.keyless: true "
                "for an endpoint that takes no key"
            )
        if base_url is None and api_key is None:
            try:
                from llmsim import LLMSimulator, SimulatorOptions
            except ImportError:
                raise StartupError(
                    f"no {model.api_key_env} set and the LLM simulator is not installed: "
                    "set the key (or model.base_url for another endpoint)"
                ) from None
            keyless = True

            simulator = LLMSimulator(SimulatorOptions())
            await simulator.start("127.0.0.1", 0)
            self._simulator = simulator
            base_url = self._simulator_url = simulator.base_url
            model = model.model_copy(update={"model": "llm-simulator"})
            log.warning(
                "no %s set: using the built-in LLM simulator at %s (a simulator, not a model)",
                model.api_key_env,
                base_url,
            )
        self._base_url = base_url or GROQ_BASE_URL
        return self._client(model, self._base_url, None if keyless else api_key)

    def _client(self, model: ModelConfig, base_url: str, api_key: str | None) -> Model:
        return OpenAICompatibleModel(
            base_url=base_url,
            api_key=api_key,
            model=model.model,
            retry=model.retry,
            timeout=model.timeout,
            temperature=model.temperature,
            max_tokens=model.max_tokens,
            parallel_tool_calls=model.parallel_tool_calls,
            transport=model.transport,
            ca_file=model.ca_file,
            cert_file=model.cert_file,
            key_file=model.key_file,
            pacing=model.pacing,
            max_rate_limit_wait=model.max_rate_limit_wait,
            # The built-in simulator is this process's own: never through a proxy.
            environ={} if base_url == self._simulator_url else None,
            on_error=self.telemetry.model_error_hook(model.model),
            redact=self.redact,
        )

    def _model_for(self, override: Mapping[str, object] | None) -> Model:
        """The model of a partial model section (a variant's, a tier's); each distinct
        one is built once. Unset or empty: the top-level model.

        Raises:
            StartupError: it names an API key variable that is unset.
        """
        assert self._model is not None
        if not override:
            return self._model
        resolved = resolve_model(self.config.model, override)
        key = resolved.model_dump_json()
        found = self._models.get(key)
        if found is not None:
            return found
        if resolved.keyless:
            api_key = None
        elif resolved.api_key_env == self.config.model.api_key_env:
            api_key = self._api_key
        else:
            api_key = self._environ.get(resolved.api_key_env)
            if not api_key and self._simulator is None:
                raise StartupError(
                    f"a model variant names {resolved.api_key_env}, which is unset or empty"
                )
        base_url = resolved.base_url or self._base_url
        found = self._models[key] = self._client(resolved, base_url, api_key)
        return found

    def _routers(
        self, config: SidecarConfig, previous: SidecarConfig | None = None
    ) -> dict[str, VariantRouter]:
        """Each profile's variants (and tiers) as routers; profiles with neither: none.

        On a reload (``previous`` set), a canary rolled back stays rolled back unless the
        reload changed it (its weight, model or prompt) or its profile's rollback policy.
        """
        routers = {}
        old_routers = self.agent.routers if self.agent is not None and previous else {}
        for name, profile in config.profiles.items():
            variants = self._variants(profile)
            if not variants:
                continue
            old = old_routers.get(name)
            before = previous.profiles.get(name) if previous is not None else None
            if old is not None and before is not None and before.rollback == profile.rollback:
                unchanged = {v.name: v for v in before.variants}
                for variant, v in zip(variants, profile.variants, strict=False):
                    kept = old.variants.get(variant.name)
                    if kept is not None and unchanged.get(variant.name) == v:
                        variant.rolled_back = kept.rolled_back
                        variant.samples = kept.samples
            routers[name] = VariantRouter(
                name, variants, profile.rollback, on_rollback=self._rolled_back
            )
            for variant in variants:
                if variant.name:
                    self.telemetry.variant_state(name, variant.name, variant.in_rotation)
        return routers

    def _variants(self, profile: ProfileConfig) -> list[Variant]:
        if not profile.variants and profile.tools_model is None:
            return []
        default_prompt = {"role": "system", "content": profile.system_prompt}
        if not profile.variants:
            models = RunModels(self._model_for(None), self._model_for(profile.tools_model))
            return [Variant("", 1.0, models, default_prompt)]
        variants = []
        for v in profile.variants:
            tools = v.tools_model if v.tools_model is not None else profile.tools_model
            models = RunModels(
                self._model_for(v.model), self._model_for(tools) if tools is not None else None
            )
            prompt = (
                {"role": "system", "content": v.system_prompt}
                if v.system_prompt is not None
                else default_prompt
            )
            variants.append(Variant(v.name, v.weight, models, prompt))
        return variants

    async def reload(self, config: SidecarConfig) -> list[str]:
        """Apply ``config`` to the runs that start from now on; runs in flight finish on
        what they started with. Profiles (prompts, tool lists, budgets, variants and
        their weights, tiering), prices and the principals reload; every other section
        needs a restart.

        Returns:
            The top-level sections that changed.

        Raises:
            ConfigError: the new configuration changes a section that needs a restart,
                or switches caller authentication off; nothing was applied.
            StartupError: a model it names cannot be used (an unset key), a token file
                or the signing key of ``auth.tool_assertion`` cannot be read, or it fails
                the start-time exposure check; nothing was applied.
        """
        old = self.config
        restart = _restart_only_changes(old, config)
        if restart:
            raise ConfigError("these settings take effect only at a restart: " + ", ".join(restart))
        for warning in check_reload(old, config):
            log.warning("%s", warning)
        agent, servicer = self.agent, self._servicer
        assert agent is not None and servicer is not None
        changed = [
            section for section in _RELOADABLE if getattr(old, section) != getattr(config, section)
        ]
        if not changed:
            return []
        # Everything new is built first; only then is anything swapped in.
        routers = self._routers(config, previous=old)
        authenticator = Authenticator(config.auth, self._environ)
        tool_identity = agent.tool_identity
        if config.auth.tool_assertion != old.auth.tool_assertion:
            tool_identity = ToolIdentity.from_config(config.auth.tool_assertion)
        memory = self.memory
        if memory is not None:
            memory.set_models(
                {
                    name: self._model_for(p.context.memory_model)
                    for name, p in config.profiles.items()
                    if p.context.memory_model
                }
            )
        context = ContextAssembler(config.profiles, memory)
        prices = self._prices(config)
        agent.loop.set_profiles(config.profiles)
        agent.loop.set_tool_versions(_tool_versions(config))
        agent.context, agent.prices, agent.routers = context, prices, routers
        agent.tool_identity = self.tool_identity = tool_identity
        servicer.authenticator = authenticator
        self.config = config
        if self._ready:
            self._check_profile_tools()
        return changed

    def _prices(self, config: SidecarConfig) -> PriceTable:
        return PriceTable(
            config.prices,
            # The embedded simulator's runs are priced as the configured model would
            # charge for their tokens, and say so.
            priced_as=config.model.model if self._simulator is not None else None,
            simulated=self._simulator is not None,
        )

    def _rolled_back(self, profile: str, variant: str, why: str) -> None:
        self.telemetry.variant_rolled_back(profile, variant)
        self.audit.record("variant_rolled_back", "", profile=profile, variant=variant, why=why)

    async def _open_state(self, model: Model) -> ContextAssembler:
        """Open the session store and the result cache; build the context assembler."""
        config = self.config
        store = store_from_config(config.sessions, postgres_dsn=self._postgres_dsn)
        await store.open()
        self.store = store
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
            self.memory = MemoryKeeper(
                model,
                store,
                timeout=config.model.timeout,
                by_profile={
                    name: self._model_for(p.context.memory_model)
                    for name, p in config.profiles.items()
                    if p.context.memory_model
                },
            )
        return ContextAssembler(config.profiles, self.memory)

    async def start(self) -> int:
        """Start serving; return the bound port.

        Raises:
            SessionStoreError: the session store cannot be opened.
            StartupError: the configuration exposes the sidecar and does not say
                ``insecure``, or a TLS file cannot be read.
        """
        for warning in check_exposure(self.config):
            log.warning("%s", warning)
        self._model = await self._start_model()
        context = await self._open_state(self._model)
        loop = AgentLoop(
            self._model,
            self.catalog,
            self.connections,
            self.config.profiles,
            self.results,
            redact=self.redact,
            max_message_bytes=self.config.server.max_message_bytes,
        )
        loop.set_tool_versions(_tool_versions(self.config))
        options = [
            ("grpc.max_send_message_length", self.config.server.max_message_bytes),
            ("grpc.max_receive_message_length", self.config.server.max_message_bytes),
        ]
        server = grpc.aio.server(options=options)
        assert self.store is not None
        self.agent = Agent(
            loop,
            self.store,
            context=context,
            telemetry=self.telemetry,
            prices=self._prices(self.config),
            max_response_bytes=self.config.server.max_message_bytes,
            max_runs=self.config.server.max_concurrent_runs,
            max_sessions=self.config.sessions.max_sessions,
            audit=self.audit,
            routers=self._routers(self.config),
            tool_identity=self.tool_identity,
        )
        self._servicer = AgentServicer(
            self.agent,
            stream_buffer_bytes=self.config.server.stream_buffer_bytes,
            authenticator=self.authenticator,
        )
        if self.telemetry.metrics is not None:
            metrics = self.config.telemetry.metrics
            self.metrics_port = self.telemetry.metrics.serve(metrics.host, metrics.port)
        add_to_server(self._servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        if self.config.server.reflection:
            enable_reflection(server, (SERVICE_NAME, health.SERVICE_NAME))
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        server_config = self.config.server
        addresses = [f"{server_config.host}:{server_config.port}"]
        if server_config.unix_socket is not None:
            try:
                claim_unix_socket(server_config.unix_socket)
            except UnixSocketError as exc:
                raise StartupError(f"server.unix_socket: {exc}") from None
            addresses.append(f"unix:{server_config.unix_socket}")
        with socket_umask(server_config.unix_socket is not None):
            bound = []
            for address in addresses:
                try:
                    if server_config.tls is not None:
                        # Credentials of its own per port: each port's certificate fetcher
                        # answers "unchanged" after its first load.
                        credentials = server_credentials(server_config.tls)
                        bound.append(server.add_secure_port(address, credentials))
                    else:
                        bound.append(server.add_insecure_port(address))
                except RuntimeError:
                    raise StartupError(f"cannot listen on {address}") from None
            self.port = bound[0]
            await server.start()
        self._server = server
        if server_config.unix_socket is not None:
            # Callers in other containers of the pod share the sidecar's group (fsGroup).
            os.chmod(server_config.unix_socket, SOCKET_MODE)
        if server_config.health_port is not None:
            # For probes that speak no TLS (the kubelet's): health alone, in plaintext.
            probes = grpc.aio.server()
            health_pb2_grpc.add_HealthServicer_to_server(self.health, probes)
            self.health_port = probes.add_insecure_port(
                f"{server_config.host}:{server_config.health_port}"
            )
            await probes.start()
            self._health_server = probes
        for connection in self.connections.values():
            connection.start()
        self._ready_task = asyncio.get_running_loop().create_task(self._become_ready())
        return self.port

    async def _become_ready(self) -> None:
        async def discovered(connection: ToolServerConnection) -> None:
            try:
                async with asyncio.timeout(connection.config.discovery_timeout):
                    await connection.discovered.wait()
            except TimeoutError:
                log.warning(
                    "tool server %s (%s) not discovered within %.1fs%s; its tools stay hidden "
                    "until it answers",
                    connection.name,
                    connection.config.address,
                    connection.config.discovery_timeout,
                    f": {connection.last_error}" if connection.last_error else "",
                )

        await asyncio.gather(*(discovered(c) for c in self.connections.values()))
        self._ready = True
        self._check_profile_tools()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def _check_profile_tools(self) -> None:
        """Warn about (and count) names in profiles' tool lists that no tool server
        offers: a typo there silently leaves the model without the tool."""
        reported: dict[str, frozenset[str]] = {}
        for name, profile in self.config.profiles.items():
            unknown = frozenset(self.catalog.unknown(profile.tools or []))
            self.telemetry.unknown_tools(name, len(unknown))
            fresh = unknown - self._unknown_tools.get(name, frozenset())
            if fresh:
                log.warning(
                    "profile %s names tools no tool server offers: %s; the model does not "
                    "get them (a typo, or a server that is down?)",
                    name,
                    ", ".join(sorted(fresh)),
                )
            reported[name] = unknown
        self._unknown_tools = reported

    async def stop(self, grace: float | None = None) -> None:
        """Drain: health NOT_SERVING, refuse new runs, let in-flight runs finish."""
        grace = self.config.server.grace_period if grace is None else grace
        if self._ready_task is not None and not self._ready_task.done():
            self._ready_task.cancel()
        await self.health.enter_graceful_shutdown()
        agent = self.agent
        if agent is not None:
            # Refuse new runs with UNAVAILABLE (actionable) while the port stays open,
            # and give the runs in flight the grace period.
            agent.start_draining()
            deadline = asyncio.get_running_loop().time() + grace
            try:
                async with asyncio.timeout_at(deadline):
                    await agent.wait_idle()
            except TimeoutError:
                log.warning("grace period over; interrupting the runs still in flight")
                # Each ends INTERRUPTED with a result its caller receives (run_finished
                # stays the last event of every stream), and is stored as such.
                await agent.interrupt_all("the sidecar stopped before the run ended")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await agent.wait_refusals_settled(_REFUSALS_QUIET)
        if self._server is not None:
            await self._server.stop(0.5)
        if self._health_server is not None:
            await self._health_server.stop(0)
        if agent is not None:
            # Cancelled runs store their turns as they unwind: let them before closing.
            try:
                async with asyncio.timeout(5):
                    await agent.wait_idle()
            except TimeoutError:
                log.warning("runs still storing their turns after 5s; closing the store")
        if self.memory is not None:
            await self.memory.close()
        if self.results is not None:
            await self.results.close()
        if self._shared_results is not None:
            await self._shared_results.close()
        if self.store is not None:
            await self.store.close()
        for connection in self.connections.values():
            await connection.close()
        if self._model is not None:
            await self._model.close()
        for other in self._models.values():
            await other.close()
        if self._simulator is not None:
            await self._simulator.stop()  # type: ignore[attr-defined]
        await self.telemetry.close()
        self.audit.close()


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
    """

    def __init__(self, sidecar: Sidecar, path: Path, read: Callable[[], SidecarConfig]) -> None:
        self._sidecar = sidecar
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
            sidecar = self._sidecar
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
                changed = await sidecar.reload(config)
            except (ConfigError, StartupError) as exc:
                self._seen = before
                log.error("configuration not reloaded (%s): %s", why, exc)
                sidecar.audit.record("config_reload_refused", "", why=why, message=str(exc))
                sidecar.telemetry.config_reloaded(False)
                return False
            except Exception as exc:
                # A bug: said loudly, and the sidecar goes on with what it had.
                self._seen = before
                error_id = uuid.uuid4().hex[:16]
                log.exception("configuration not reloaded (%s): internal error %s", why, error_id)
                sidecar.audit.record(
                    "config_reload_refused",
                    "",
                    why=why,
                    message=f"internal error {error_id} ({type(exc).__name__})",
                )
                sidecar.telemetry.config_reloaded(False)
                return False
            if changed:
                # Loud by default: what the sidecar does just changed.
                log.warning("configuration reloaded (%s): %s", why, ", ".join(changed))
                sidecar.audit.record("config_reloaded", "", why=why, sections=changed)
            else:
                log.info("configuration reloaded (%s): nothing changed", why)
            sidecar.telemetry.config_reloaded(True)
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
    """
    sidecar = Sidecar(
        config, api_key=api_key, postgres_dsn=postgres_dsn, redactor=redactor, environ=environ
    )
    port = await sidecar.start()
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
        reloader = ConfigReloader(sidecar, Path(config_path), reread)
        pending: set[asyncio.Task[bool]] = set()

        def on_hangup() -> None:
            task = loop.create_task(reloader.reload("SIGHUP"))
            pending.add(task)
            task.add_done_callback(pending.discard)

        loop.add_signal_handler(signal.SIGHUP, on_hangup)
        if config.server.config_watch_interval is not None:
            reloader.watch(config.server.config_watch_interval)
    if sidecar.metrics_port is not None:
        print(f"metrics on {config.telemetry.metrics.host}:{sidecar.metrics_port}", flush=True)
    if sidecar.health_port is not None:
        print(f"health on {config.server.host}:{sidecar.health_port}", flush=True)
    if config.server.unix_socket is not None:
        print(f"socket on unix:{config.server.unix_socket}", flush=True)
    print(f"listening on {config.server.host}:{port}", flush=True)
    await stop.wait()
    if reloader is not None:
        await reloader.close()
    log.info("draining (grace %.1fs)", config.server.grace_period)
    await sidecar.stop()
    log.info("stopped")
