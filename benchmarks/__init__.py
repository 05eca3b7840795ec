"""clglow's side-by-side benchmarks (run from a source checkout): ``python -m benchmarks --help``."""
