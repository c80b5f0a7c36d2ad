"""Example tool servers, each its own process: ``python -m toolservers.examples.NAME``.

Their data is fake and deterministic (derived from the ids asked about), so
demos, tests and benchmarks give the same answers everywhere.
"""

#: Example name to the module that serves it (``agent-toolserver NAME``).
EXAMPLES: dict[str, str] = {
    "orders": "toolservers.examples.orders",
    "logistics": "toolservers.examples.logistics",
    "shop": "toolservers.examples.shop",
}
