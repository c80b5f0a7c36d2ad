"""Transport security, caller identity, the audit record and per-caller quotas."""
