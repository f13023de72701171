"""Tuning one key: the job, its levels and search, compiling, checking and timing variants."""
