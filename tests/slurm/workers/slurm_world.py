"""One rank of a job on the Slurm cluster of the tests: argv[1] is the expected host of
every rank (comma-separated, in rank order), argv[2] the expected OMP_NUM_THREADS of every
rank ("-": not checked). Each rank checks its host name, its topology against that list,
its threads, and a Sum allreduce against n(n+1)/2; prints RANK <r> OK."""
import os
import socket
import sys

import mxnet as mx

import mxhorovod as hvd
from support.topology import check_topology

hosts = sys.argv[1].split(",")
threads = None if sys.argv[2] == "-" else sys.argv[2].split(",")
hvd.init()
r = hvd.rank()
assert hvd.size() == len(hosts), (r, hvd.size(), hosts)
assert socket.gethostname() == hosts[r], "rank %d runs on %s, expected %s" % (
    r, socket.gethostname(), hosts[r])
check_topology(hvd, hosts)
if threads is not None:
    assert os.environ.get("OMP_NUM_THREADS") == threads[r], \
        "rank %d on %s: OMP_NUM_THREADS=%s, expected %s" % (
            r, hosts[r], os.environ.get("OMP_NUM_THREADS"), threads[r])
    assert "MXHOROVOD_OMP_NUM_THREADS_AUTO" not in os.environ  # the guard's, not the rank's
y = hvd.allreduce(mx.nd.array([r + 1.0]), op=hvd.Sum, name="slurm.sum")
n = len(hosts)
assert y.asnumpy().tolist() == [n * (n + 1) / 2], (r, y.asnumpy())
print("RANK %d OK on %s threads=%s" % (r, socket.gethostname(), os.environ.get("OMP_NUM_THREADS")),
      flush=True)
