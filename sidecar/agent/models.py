"""The models a configuration names, each built once: the top-level model (or the built-in
LLM simulator when no key is set), and every partial model section of a variant, a tier
or a memory summariser; and the profiles' variant routers over them.

A model client is built the first time a section names it and kept for the process: a
reload that names the same model again reuses its client (its connections and its
pacer); one that names a new model builds it before anything is swapped in.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

from sidecar.agent.variants import RunModels, Variant, VariantRouter
from sidecar.config import (
    GROQ_BASE_URL,
    ModelConfig,
    ProfileConfig,
    SidecarConfig,
    model_sections,
    resolve_model,
)
from sidecar.errors import ModelError, StartupError
from sidecar.llm.model import Model
from sidecar.llm.openai_model import OpenAICompatibleModel
from sidecar.llm.served import retirement_warnings, unserved
from sidecar.redaction import Redactor

__all__ = ["ModelRoster"]

log = logging.getLogger(__name__)

ErrorHook = Callable[[str], Callable[[ModelError], None] | None]
"""Given a model's name, the hook its client calls with each failed attempt (metrics)."""
RollbackListener = Callable[[str, str, str], None]
VariantState = Callable[[str, str, bool], None]


class ModelRoster:
    """Every model client of the process, by the model section that names it.

    Args:
        config: The model section of the configuration the sidecar started with (a
            reload cannot change it).
        api_key: The top-level model's key; None: none is set.
        environ: Where the keys other model sections name are read.
        redact: Applied to every model error's message.
        on_error: The hook of each model's failed attempts (metrics).
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        api_key: str | None,
        environ: Mapping[str, str],
        redact: Redactor,
        on_error: ErrorHook,
    ) -> None:
        self._config = config
        self._api_key = api_key
        self._environ = environ
        self._redact = redact
        self._on_error = on_error
        self._simulator: Any = None
        self._simulator_url: str | None = None
        self._base_url = ""
        self._default: Model | None = None
        self._models: dict[str, Model] = {}  # by resolved model section

    @property
    def simulated(self) -> bool:
        """The built-in LLM simulator answers in place of a model."""
        return self._simulator is not None

    @property
    def default(self) -> Model:
        """The top-level model (after :meth:`start`)."""
        assert self._default is not None, "ModelRoster.start() first"
        return self._default

    async def start(self) -> Model:
        """Build the top-level model: the configured endpoint, or the embedded simulator.

        Raises:
            StartupError: an endpoint is configured but its key is not set (and the
                endpoint is not declared keyless), or the simulator is needed and missing.
        """
        model = self._config
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
        self._default = self._client(model, self._base_url, None if keyless else api_key)
        return self._default

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
            on_error=self._on_error(model.model),
            redact=self._redact,
            reasoning_effort=model.reasoning_effort,
            service_tier=model.service_tier,
            flex_fallback=model.flex_fallback,
            max_tools=model.max_tools_per_request,
            input_tokens_per_minute=model.input_tokens_per_minute,
            output_tokens_per_minute=model.output_tokens_per_minute,
            token_window=model.token_limits_window,
        )

    def model_for(self, override: Mapping[str, object] | None) -> Model:
        """The model of a partial model section (a variant's, a tier's, a summariser's);
        unset or empty: the top-level model.

        Raises:
            StartupError: it names an API key variable that is unset.
        """
        if not override:
            return self.default
        resolved = resolve_model(self._config, override)
        key = resolved.model_dump_json()
        found = self._models.get(key)
        if found is not None:
            return found
        if resolved.keyless:
            api_key = None
        elif resolved.api_key_env == self._config.api_key_env:
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

    async def check_served(self, config: SidecarConfig) -> list[str]:
        """Ask each endpoint the configuration's model sections use for its model list
        and log what the retirement schedule says; return why a model section names a
        model its endpoint does not serve (empty: every one is served, or an endpoint
        has no list, which is logged as a warning).

        Raises:
            StartupError: a model section names an API key variable that is unset.
        """
        named: dict[str, tuple[OpenAICompatibleModel, list[tuple[str, str]]]] = {}
        for where, override in model_sections(config):
            client = self.model_for(override)
            resolved = resolve_model(self._config, override or {})
            if not isinstance(client, OpenAICompatibleModel):
                continue
            base = resolved.base_url or self._base_url
            named.setdefault(base, (client, []))[1].append((where, resolved.model))
        for warning in retirement_warnings(
            (pair for _, pairs in named.values() for pair in pairs), dt.date.today()
        ):
            log.warning("%s", warning)
        problems = []
        for base, (client, pairs) in named.items():
            served = await client.served(min(self._config.timeout, 10.0))
            if served.ids is None:
                log.warning(
                    "the model endpoint %s gave no model list (%s): the model names "
                    "are not checked before the first run",
                    base,
                    served.why,
                )
                continue
            problems += unserved(pairs, served.ids)
        return problems

    def routers(
        self,
        config: SidecarConfig,
        *,
        previous: tuple[SidecarConfig, Mapping[str, VariantRouter]] | None,
        on_rollback: RollbackListener,
        on_state: VariantState,
    ) -> dict[str, VariantRouter]:
        """Each profile's variants (and tiers) as routers; profiles with neither: none.

        On a reload (``previous``: the configuration and routers it replaces), a canary
        rolled back stays rolled back unless the reload changed it (its weight, model or
        prompt) or its profile's rollback policy.

        Raises:
            StartupError: a model a variant names cannot be used.
        """
        old_config, old_routers = previous if previous is not None else (None, {})
        routers = {}
        for name, profile in config.profiles.items():
            variants = self._variants(profile)
            if not variants:
                continue
            old = old_routers.get(name)
            before = old_config.profiles.get(name) if old_config is not None else None
            if old is not None and before is not None and before.rollback == profile.rollback:
                unchanged = {v.name: v for v in before.variants}
                for variant, v in zip(variants, profile.variants, strict=False):
                    kept = old.variants.get(variant.name)
                    if kept is not None and unchanged.get(variant.name) == v:
                        variant.rolled_back = kept.rolled_back
                        variant.samples = kept.samples
            routers[name] = VariantRouter(name, variants, profile.rollback, on_rollback=on_rollback)
            for variant in variants:
                if variant.name:
                    on_state(name, variant.name, variant.in_rotation)
        return routers

    def _variants(self, profile: ProfileConfig) -> list[Variant]:
        if not profile.variants and profile.tools_model is None:
            return []
        default_prompt = {"role": "system", "content": profile.system_prompt}
        if not profile.variants:
            models = RunModels(self.model_for(None), self.model_for(profile.tools_model))
            return [Variant("", 1.0, models, default_prompt)]
        variants = []
        for v in profile.variants:
            tools = v.tools_model if v.tools_model is not None else profile.tools_model
            models = RunModels(
                self.model_for(v.model), self.model_for(tools) if tools is not None else None
            )
            prompt = (
                {"role": "system", "content": v.system_prompt}
                if v.system_prompt is not None
                else default_prompt
            )
            variants.append(Variant(v.name, v.weight, models, prompt, shadow=v.shadow))
        return variants

    def memory_models(self, config: SidecarConfig) -> dict[str, Model]:
        """The summariser of each profile with memory on.

        Raises:
            StartupError: a model a profile names cannot be used.
        """
        return {
            name: self.model_for(p.context.memory_model)
            for name, p in config.profiles.items()
            if p.context.memory
        }

    async def close(self) -> None:
        if self._default is not None:
            await self._default.close()
        for model in self._models.values():
            await model.close()
        if self._simulator is not None:
            await self._simulator.stop()
