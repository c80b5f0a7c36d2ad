"""The benchmark against the peers: ``python -m bench.peers`` (``make bench``)."""
