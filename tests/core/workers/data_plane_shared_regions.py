"""Allreduce of arrays in shared regions (``_core.shared_array``, what DistributedTrainer's
gradient buckets are made of): the peers read them through their mappings of the owner's
memfd instead of process_vm_readv. Sums, averages and scaled sums of every float dtype and
int32 against numpy, with every rank's array shared, with only rank 0's shared (the others
read it through the mapping, it reads theirs by process_vm_readv), in a group, and the
regions freed with their arrays, and a group of more arrays than the peers keep mappings
of. 2 or more ranks. Prints RANK <r> OK."""
import gc

import mxnet as mx
import numpy as np

import mxhorovod as hvd
from mxhorovod import _core

CODES = {"i": 0, "u": 1, "f": 2}


def shared(values):
    dt = values.dtype
    a = mx.nd.from_dlpack(_core.shared_array(values.size, CODES[dt.kind], dt.itemsize * 8))
    assert a.dtype == dt and a.shape == (values.size,), (a.dtype, a.shape)
    assert not a.asnumpy().any(), "a new region is zero-filled"
    a[:] = values
    return a


def peer_mappings():
    """This process's read-only mappings of regions (the peers', mapped by the allreduce)."""
    return sum(1 for line in open("/proc/self/maps")
               if "mxhorovod-bucket" in line and line.split()[1].startswith("r--s"))


def own_regions():
    return sum(1 for line in open("/proc/self/maps")
               if "mxhorovod-bucket" in line and line.split()[1].startswith("rw-s"))


hvd.init()
r, n = hvd.rank(), hvd.size()
assert _core.shared_array(0, 2, 32) is None
assert _core.shared_array(10, 2, 12) is None
elements = 300_001  # 1.2 MB of float32, split unevenly over the ranks' blocks

for dt in (np.float32, np.float64, np.float16, np.int32):
    base = (np.arange(elements) % 97).astype(dt)
    a = shared(base + r)
    hvd.allreduce_(a, name="sum.%s" % np.dtype(dt).name, op=hvd.Sum)
    want = base * n + sum(range(n))
    np.testing.assert_array_equal(a.asnumpy(), want.astype(dt))

# Average and scale factors (the scale may be applied inside the reduction).
base = np.linspace(-1, 1, elements, dtype=np.float32)
a = shared(base * (r + 1))
hvd.allreduce_(a, name="avg", op=hvd.Average, prescale_factor=2.0, postscale_factor=0.5)
np.testing.assert_allclose(a.asnumpy(), base * np.mean([q + 1 for q in range(n)]), rtol=1e-5)
assert peer_mappings() >= n - 1, (peer_mappings(), "the peers' regions were not mapped")

# Only rank 0's array shared: the others map it, rank 0 reads theirs by process_vm_readv.
values = (np.arange(elements) % 89).astype(np.float32) * (r + 1)
a = shared(values) if r == 0 else mx.nd.array(values)
hvd.allreduce_(a, name="mixed", op=hvd.Sum)
np.testing.assert_array_equal(a.asnumpy(), (np.arange(elements) % 89).astype(np.float32) * sum(q + 1 for q in range(n)))

# A group of two shared arrays and an ordinary one: reduced in place, as one concatenation.
parts = [shared(np.full(elements, r + 1, np.float32)), shared(np.full(1000, 2 * r, np.float32)),
         mx.nd.full((5000,), r, dtype=np.float32)]
hvd.grouped_allreduce_(parts, name="group", op=hvd.Sum)
for p, v in zip(parts, (sum(q + 1 for q in range(n)), sum(2 * q for q in range(n)), sum(range(n)))):
    np.testing.assert_array_equal(p.asnumpy(), np.full(p.shape, v, np.float32))

# A group of more shared arrays than the peers keep mappings of (64): a mapping made or
# found in a call is never unmapped in it (the call reads through it); the peer whose
# regions do not all fit is read by process_vm_readv instead.
many = [shared(np.full(1000, r + i, np.float32)) for i in range(70)]
hvd.grouped_allreduce_(many, name="many", op=hvd.Sum)
for i, m in enumerate(many):
    np.testing.assert_array_equal(m.asnumpy(), np.full(1000, sum(q + i for q in range(n)), np.float32))
del many

# Regions made and freed one after another (a trainer made again and again): each is
# mapped by the peers once, and the peers keep at most 64 mappings of one rank's regions.
for i in range(70):
    c = shared(np.full(20_000, r + i, np.float32))
    hvd.allreduce_(c, name="churn.%d" % i, op=hvd.Sum)
    np.testing.assert_array_equal(c.asnumpy(), np.full(20_000, sum(q + i for q in range(n)), np.float32))
    del c
assert peer_mappings() <= 64 * (n - 1), peer_mappings()

# Regions are freed with their arrays (and with capsules nobody consumed).
del a, parts
mx.nd.waitall()
gc.collect()
before = own_regions()
capsule = _core.shared_array(1000, 2, 32)
assert own_regions() == before + 1
del capsule
assert own_regions() == before, (own_regions(), before)
b = shared(np.ones(1000, np.float32))
assert own_regions() == before + 1
del b
mx.nd.waitall()
gc.collect()
assert own_regions() == before, (own_regions(), before)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
