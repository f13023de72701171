"""Launching compiled variants: numba's argument layout, the generated fast path, the C
launcher, and numba's own launch for what the fast path does not take."""
