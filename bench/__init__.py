"""numbatune's benchmark suite: ``python bench/run.py OUT_DIR [--smoke]``; docs/benchmarks.md."""
