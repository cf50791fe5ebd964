"""Side-by-side benchmarks against the baselines (see benchmarks/README.md)."""
