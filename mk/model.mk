# The model path's benchmark: CPU per model request by transport, and a burst against a
# rate-limited endpoint with pacing on and off (docs/models.md quotes it).
#
# bench-model  python -m bench.micro.model_transport: writes bench/results/model_transport.json
#              and prints the tables (about a minute). `make bench` runs it first and quotes
#              them in docs/benchmarks.md.

.PHONY: bench-model

## bench-model: CPU per model request by transport, and 429s in a burst with and without pacing.
bench-model: install
	$(PY) -m bench.micro.model_transport

bench: bench-model
