"""``python3 -m bench.floor [BATCHES [PER_BATCH]]``: the floor program's own timing, as JSON."""

import json
import sys

from bench.floor import run_program

counts = [int(value) for value in sys.argv[1:3]]
print(json.dumps(run_program(*(counts + [30, 300][len(counts) :])), indent=1))
