"""Benchmarks: `pixelpipe bench` and the scripts in benchmarks/."""
