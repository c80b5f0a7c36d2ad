# Background runs (StartRun, WatchRun ...; docs/background-runs.md).
#
# bench-background  what a background run costs against the same run streamed (CPU per run
#                   of the sidecar and its tool server, latency), and the throughput of one
#                   and two replicas on one private PostgreSQL server; writes
#                   bench/results/background_runs.md. `make bench` runs it too, and quotes
#                   it in docs/benchmarks.md.
# soak-background   500 background runs across two replicas on one PostgreSQL, one replica
#                   SIGKILLed halfway: every run judged (none lost, events whole, the rules of
#                   resumption kept); bench/results/background_soak.md. Part of `make soak`.
.PHONY: bench-background soak-background

## bench-background: a background run against a streamed one, and two replicas' throughput on
## one PostgreSQL (a few minutes).
bench-background: install postgres
	$(PY) -m bench.micro.background_runs

bench: bench-background

## soak-background: 500 background runs on two replicas of one PostgreSQL, one killed halfway;
## fails when any run is lost (a minute or two).
soak-background: install postgres
	$(PY) -m bench.soak.background

soak: soak-background
