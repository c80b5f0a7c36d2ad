"""One applied configuration, as the runs admitted on it read it.

Applying a configuration (at start, and at each reload) builds a new :class:`Snapshot`
and swaps it in at once; nothing in an old one is ever changed. A run takes the snapshot
current when it is admitted and reads only that one until it ends, so a reload never
changes a run in flight: its profile, variant, prices, context window and tool identity
stay what they were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sidecar.agent.prices import PriceTable
from sidecar.agent.profiles import LightPath, Profile
from sidecar.agent.variants import VariantRouter
from sidecar.config import SidecarConfig
from sidecar.context.assembler import ContextAssembler
from sidecar.security.identity import Authenticator
from sidecar.security.tool_identity import ToolIdentity

__all__ = ["Snapshot"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything a reload may replace, built together from one configuration."""

    config: SidecarConfig
    profiles: Mapping[str, Profile]
    routers: Mapping[str, VariantRouter]
    """Each profile's variants (and tiers); a profile with neither has none."""
    context: ContextAssembler
    prices: PriceTable
    authenticator: Authenticator
    tool_identity: ToolIdentity
    tool_versions: Mapping[str, Sequence[tuple[str, float]]]
    """For each tool server with versions: the servers sharing its calls, by weight."""
    light: Mapping[str, LightPath]
    """Each profile's light variant, by the profile's name; a profile with none is not
    named."""
    callback_secrets: Mapping[str, bytes] = field(default_factory=dict)
    """Each principal's key for signing its runs' completion callbacks, by name ("" for
    the anonymous principal); a principal without one may name no callback."""
