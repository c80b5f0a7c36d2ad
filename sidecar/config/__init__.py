"""The sidecar's declarative configuration: one YAML file, secrets from the environment.

Config decides *what* (which model, which tools, which limits); the hot path decides
*how fast*. Everything here is validated once, at start, by :func:`load_config`; an
invalid file fails with a message naming the offending key.

One module per section (``sidecar.config.profiles``, ``sidecar.config.server`` ...), the
rules that span sections in ``sidecar.config.tree``, reading a file in
``sidecar.config.loading``; every name is imported from here.
"""

from sidecar.config.a2a import A2AConfig, A2AHttpConfig, A2ASigningConfig, A2ASkillConfig
from sidecar.config.auth import (
    AuditConfig,
    AuthConfig,
    PrincipalConfig,
    QuotaConfig,
    SecurityConfig,
    ToolAssertionConfig,
)
from sidecar.config.background import BackgroundConfig, CallbackConfig
from sidecar.config.base import (
    BreakerPolicy,
    ClientTlsConfig,
    HedgePolicy,
    HttpLimits,
    RetryPolicy,
    key_path,
)
from sidecar.config.loading import (
    dsn_password,
    expand_variables,
    load_config,
    parse_config,
    resolve_api_key,
    resolve_postgres_dsn,
    secret_environment,
)
from sidecar.config.mcp import McpEndpointConfig, McpSessionsConfig, McpTasksConfig
from sidecar.config.model import (
    GROQ_BASE_URL,
    MODEL_RETRY,
    REASONING_OUTPUT_RESERVE,
    ModelConfig,
    PriceConfig,
    resolve_model,
)
from sidecar.config.profiles import (
    BudgetConfig,
    ContextConfig,
    CostConfig,
    LightConfig,
    LightContextConfig,
    ProfileConfig,
    ReasoningPolicy,
    RollbackConfig,
    ServiceTiers,
    SpeculationConfig,
    VariantConfig,
)
from sidecar.config.recording import RecordingConfig, ReplayConfig, ReplayThresholds
from sidecar.config.server import LightPathConfig, ServerConfig, ServerTlsConfig
from sidecar.config.sessions import CacheConfig, PostgresConfig, SessionsConfig, SqliteConfig
from sidecar.config.telemetry import MetricsConfig, TelemetryConfig, TracingConfig
from sidecar.config.tools import McpServerConfig, McpToolConfig, ToolServerConfig
from sidecar.config.tree import SidecarConfig, model_sections

__all__ = [
    "GROQ_BASE_URL",
    "MODEL_RETRY",
    "REASONING_OUTPUT_RESERVE",
    "A2AConfig",
    "A2AHttpConfig",
    "A2ASigningConfig",
    "A2ASkillConfig",
    "AuditConfig",
    "AuthConfig",
    "BackgroundConfig",
    "BreakerPolicy",
    "BudgetConfig",
    "CacheConfig",
    "CallbackConfig",
    "ClientTlsConfig",
    "ContextConfig",
    "CostConfig",
    "HedgePolicy",
    "HttpLimits",
    "LightConfig",
    "LightContextConfig",
    "LightPathConfig",
    "McpEndpointConfig",
    "McpServerConfig",
    "McpSessionsConfig",
    "McpTasksConfig",
    "McpToolConfig",
    "MetricsConfig",
    "ModelConfig",
    "PostgresConfig",
    "PriceConfig",
    "PrincipalConfig",
    "ProfileConfig",
    "QuotaConfig",
    "ReasoningPolicy",
    "RecordingConfig",
    "ReplayConfig",
    "ReplayThresholds",
    "RetryPolicy",
    "RollbackConfig",
    "SecurityConfig",
    "ServerConfig",
    "ServerTlsConfig",
    "ServiceTiers",
    "SessionsConfig",
    "SidecarConfig",
    "SpeculationConfig",
    "SqliteConfig",
    "TelemetryConfig",
    "ToolAssertionConfig",
    "ToolServerConfig",
    "TracingConfig",
    "VariantConfig",
    "dsn_password",
    "expand_variables",
    "key_path",
    "load_config",
    "model_sections",
    "parse_config",
    "resolve_api_key",
    "resolve_model",
    "resolve_postgres_dsn",
    "secret_environment",
]
