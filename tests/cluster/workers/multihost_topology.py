"""Topology on hosts made by the test: argv[1] is the expected host name of every rank,
comma-separated in rank order. Each rank checks its own host name, then every topology
call against the values computed from that list, and a small Sum allreduce; with argv[2]
(MiB, default 0) also a float32 Sum allreduce of that size, whose bytes the interface
counters around the job must show. Prints RANK <r> OK."""
import socket
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd
from support.topology import check_topology

hosts = sys.argv[1].split(",")
hvd.init()
r = hvd.rank()
assert hvd.size() == len(hosts), (hvd.size(), hosts)
assert socket.gethostname() == hosts[r], "rank %d runs on %s, expected %s" % (
    r, socket.gethostname(), hosts[r])
check_topology(hvd, hosts)
# The library's own view of the hosts agrees (allgather of the names).
assert hvd.allgather_object(socket.gethostname()) == hosts
y = hvd.allreduce(mx.nd.array([r + 1.0]), op=hvd.Sum, name="topology.sum")
assert y.asnumpy().tolist() == [len(hosts) * (len(hosts) + 1) / 2], y.asnumpy()
mib = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if mib:
    count = (mib << 20) // 4
    big = hvd.allreduce(mx.nd.ones((count,)) * (r + 1), op=hvd.Sum, name="topology.big").asnumpy()
    assert big.shape == (count,) and np.all(big == len(hosts) * (len(hosts) + 1) / 2), (r, big[:4])
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
