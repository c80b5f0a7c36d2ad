# The runtime policies' benchmarks (docs/runtime-policies.md quotes them; `make bench` runs
# them first and docs/benchmarks.md quotes their last results, bench/results/NAME.md).
#
# bench-hedging  python -m bench.micro.hedging: a heavy-tailed tool with hedging off and on.

.PHONY: bench-hedging

## bench-hedging: a heavy-tailed tool with hedging off and on: tool stage P50 and P99,
## extra calls (about 1 minute).
bench-hedging: install
	$(PY) -m bench.micro.hedging

bench: bench-hedging
