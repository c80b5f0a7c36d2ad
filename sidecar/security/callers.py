"""Who calls, the same for every front: a call's principal, with a failed proof recorded
(``auth_failed``), and a principal's refusal recorded (``call_refused``).

The gRPC front, the A2A front (both bindings) and the MCP endpoint each hand their call's
credentials here, so a caller is judged and audited alike whichever door it came in by.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sidecar.errors import PermissionDenied, QuotaExceeded, RequestError, Unauthenticated
from sidecar.security.audit import AuditLog
from sidecar.security.identity import ANONYMOUS, Authenticator, Principal

__all__ = ["CallerCheck"]


class CallerCheck:
    """Names each call's principal and records what the audit record must show.

    Args:
        authenticator: The principals of the configuration applied now, read per call;
            None: every caller is anonymous.
        audit: Where failed proofs and refusals are recorded.
    """

    def __init__(self, authenticator: Callable[[], Authenticator] | None, audit: AuditLog) -> None:
        self._authenticator = authenticator
        self.audit = audit

    def principal(
        self,
        metadata: Sequence[tuple[str, str | bytes]],
        peer_identity: Mapping[str, Sequence[bytes]],
        *,
        method: str,
        peer: str,
    ) -> Principal:
        """The principal the call's credentials (its ``authorization`` metadata, its
        client certificate's identity) name.

        Args:
            method: What the call asks for, for the audit record.
            peer: Where it came from, for the audit record.

        Raises:
            Unauthenticated: the sidecar authenticates callers and this one proved nothing
                (recorded as ``auth_failed``).
        """
        authenticator = self._authenticator() if self._authenticator is not None else None
        if authenticator is None or not authenticator.enabled:
            return ANONYMOUS
        try:
            return authenticator.authenticate(metadata, peer_identity)
        except Unauthenticated as exc:
            if self.audit.enabled:
                self.audit.record("auth_failed", "", method=method, peer=peer, message=exc.message)
            raise

    def refused(self, principal: Principal, method: str, exc: RequestError) -> None:
        """Record a refusal of the principal's permission or quota (``call_refused``);
        other errors are not the caller's standing and are not recorded."""
        if self.audit.enabled and isinstance(exc, PermissionDenied | QuotaExceeded):
            self.audit.record(
                "call_refused",
                principal.name,
                method=method,
                error=type(exc).__name__,
                message=exc.message,
            )
