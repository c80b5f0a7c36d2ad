# Unix domain sockets (server.unix_socket, the SDK's --unix, the chart's socket.enabled).
#
# bench-unix  the same calls to one sidecar over its Unix socket and over loopback TCP:
#             latency (median, P99) and CPU per call of the sidecar and the client, with
#             the ratio; the figures quoted in docs/kubernetes.md (about a minute).
#             `make bench` runs it first and quotes its tables in docs/benchmarks.md.
.PHONY: bench-unix

## bench-unix: a Unix socket against loopback TCP, the same runs and calls (about a minute).
bench-unix: install
	$(PY) -m bench.micro.unix_socket

bench: bench-unix
