"""One module per contender, each with a ``Contender`` class whose ``run_once(mode,
target)`` runs one user turn of the workload (async or sync)."""
