"""The benchmark suite: figures measured side by side in one run, written to the checkout's
bench/results/<stamp>/ (bench/README.md says what each module measures).

`python -m bench.suite --quick` (make bench-quick) or `python -m bench.suite` (make bench).
Benchmarks print and record; they never assert timings. Tests only check that the runner writes well-formed
output.
"""
