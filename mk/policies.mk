# The runtime policies' benchmarks (docs/runtime-policies.md quotes them; `make bench` runs
# them first and docs/benchmarks.md quotes their last results, bench/results/NAME.md).
#
# bench-hedging  python -m bench.micro.hedging: a heavy-tailed tool with hedging off and on.
# bench-cost     python -m bench.micro.cost_guard: runs capped by the cost guard, a day's quota.
# bench-light    python -m bench.micro.light_path: a load ramp, with and without a light path.
# bench-speculation  python -m bench.micro.speculation: repeated turns, speculating or not.

.PHONY: bench-hedging bench-cost bench-light bench-speculation

## bench-hedging: a heavy-tailed tool with hedging off and on: tool stage P50 and P99,
## extra calls (about 1 minute).
bench-hedging: install
	$(PY) -m bench.micro.hedging

## bench-cost: research runs of random depth with the cost guard off, on, capping runs at
## the median cost, and a principal's day (about 15 s).
bench-cost: install
	$(PY) -m bench.micro.cost_guard

## bench-light: a load ramp against a sidecar with and without a light path: runs
## answered, refused OVERLOADED, within the budget (about 2 minutes).
bench-light: install
	$(PY) -m bench.micro.light_path

## bench-speculation: support-desk turns with speculative prefetch on and off: latency
## saved, hit rate, wasted calls (about 45 s).
bench-speculation: install
	$(PY) -m bench.micro.speculation

bench: bench-hedging bench-cost bench-light bench-speculation
