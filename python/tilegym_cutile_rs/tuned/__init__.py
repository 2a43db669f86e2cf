"""Fitted config tables, one JSON file per tuning (`<name>.json`), written by
`benchmarks/tune.py` on a GPU and read by the ops' heuristics through `_tuned`; no code."""
