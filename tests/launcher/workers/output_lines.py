"""Started by mxhorovodrun (tests/test_runner.py) for --output-filename, --binding-args and
--prefix-output-with-timestamp: each rank writes lines of its own to stdout and stderr (one
partial line, one line written in two pieces), its CPU affinity as JSON, then runs an
allreduce and prints RANK <r> OK; the test reads what reached each rank's files."""
import json
import os
import sys
import time

import mxnet as mx
import numpy as np

import mxhorovod as hvd

rank = int(os.environ["PMI_RANK"])
print("out first of rank %d" % rank, flush=True)
print("err of rank %d" % rank, file=sys.stderr, flush=True)
sys.stdout.write("out split ")
sys.stdout.flush()
time.sleep(0.2)
sys.stdout.write("line of rank %d\n" % rank)
print("AFFINITY %d %s" % (rank, json.dumps(sorted(os.sched_getaffinity(0)))), flush=True)
hvd.init()
total = hvd.allreduce(mx.nd.array([rank + 1.0]), op=hvd.Sum, name="runner.output")
np.testing.assert_allclose(total.asnumpy(), [hvd.size() * (hvd.size() + 1) / 2])
print("RANK %d OK" % rank, flush=True)
sys.stderr.write("err unterminated of rank %d" % rank)
sys.stderr.flush()
