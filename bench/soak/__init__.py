"""The soak: sustained load, then chaos under it: ``python -m bench.soak`` (``make soak``)."""
