"""Speculative prefetch: the rules learned from stored turns (prediction) and the calls a
run's input predicts, started before the model asks (prefetch). Calls started ahead of
their step, from the stream or speculated, are dispatched by ``sidecar.tools.ahead``."""
