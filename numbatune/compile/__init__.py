"""Compiling variants: in worker processes with no GPU, once per distinct kernel, kept on disk."""
