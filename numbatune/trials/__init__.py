"""Trial runs: each variant's first run on this kind of device, in a disposable worker process."""
