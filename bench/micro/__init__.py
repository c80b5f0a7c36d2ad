"""Micro-benchmarks of one part each: the model transport, the session store,
telemetry, the context window and the latency bill."""
