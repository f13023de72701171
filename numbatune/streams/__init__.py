"""Streams: what a stream argument means, and the order of tuned launches across streams.

``handles`` turns the streams users pass into raw handles; ``order`` decides which streams a
launch must wait for; ``events`` records and waits on CUDA events; ``monitor`` is what every tuned
launch reports to (ordering, deferred release, profiles); ``memory`` reads and frees cached
device memory.
"""
