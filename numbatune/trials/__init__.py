"""Trial runs: each variant's first run on this kind of device, in a disposable worker process.

:mod:`~numbatune.trials.runs` runs kernels in the trial worker; :mod:`~numbatune.trials.ledger`
remembers which variants ran; :mod:`~numbatune.trials.trying` compiles a tuning's variants and
tries each as it compiles, the one function the tuned kernel calls for both.
"""
