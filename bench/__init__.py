"""Benchmarks: figures measured side by side in one run, written to bench/results/<stamp>/.

`python -m bench --quick` (make bench-quick) or `python -m bench` (make bench). Benchmarks print and
record; they never assert timings. Tests only check that the runner writes well-formed output.
"""
