"""Transport security, caller identity, the audit record, per-caller quotas, and the
identity tool calls carry (with its signed assertion)."""
