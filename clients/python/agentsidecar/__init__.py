"""Python bindings for the agent sidecar: generated stubs under ``agentsidecar.v1``."""
