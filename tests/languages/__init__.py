"""Tests across languages, which need every toolchain and the libraries built first.

They run with ``make test-languages`` (part of ``make test``), which builds what they use;
a plain ``pytest`` leaves this directory out (``--ignore`` in pyproject.toml), and
``pytest tests/languages`` runs it once the builds are there.

- ``test_tool_servers``: one sidecar calls tools served in Python, Go, TypeScript and Java in
  one step.
- ``test_install_*``: each documented install path, from an empty directory, with the files
  the docs show (read from the docs themselves).
"""
