"""Benchmarks: the sidecar against the peers a user would pick instead, side by side."""
