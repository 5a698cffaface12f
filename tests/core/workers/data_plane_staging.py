"""Allreduce of groups of arrays MXNet allocated, of 64 KiB to 256 MiB: each rank copies
what its peers read (every block but its own, then its own reduced) into a staging region
of its own (a memfd named mxhorovod-staging), and the peers read it through their mappings
instead of process_vm_readv. A single array, or a group under 64 KiB, is not staged. Sums,
averages and scaled sums of every float dtype and int32 against numpy, at and around the
threshold, with blocks cut across the buffers of a group, the region grown by a larger
group, and a group mixing a shared array (a bucket) with ordinary ones. 2 or more ranks.
Prints RANK <r> OK."""
import mxnet as mx
import numpy as np

import mxhorovod as hvd
from mxhorovod import _core


def maps(perm):
    """This process's mappings of staging regions with permissions ``perm`` ('rw-s': its
    own, 'r--s': its peers')."""
    return sum(1 for line in open("/proc/self/maps")
               if "mxhorovod-staging" in line and line.split()[1] == perm)


hvd.init()
r, n = hvd.rank(), hvd.size()
assert maps("rw-s") == 0 and maps("r--s") == 0


def pair(values, name, **kw):
    """grouped_allreduce_ of [values + r, values + 2 r] (two buffers); returns both."""
    parts = [mx.nd.array(values + r, dtype=values.dtype), mx.nd.array(values + 2 * r, dtype=values.dtype)]
    hvd.grouped_allreduce_(parts, name=name, **kw)
    return [p.asnumpy() for p in parts]


# Under the threshold (64 KiB in all), or one array alone: no staging.
got = pair(np.ones(8191, np.float32), "small", op=hvd.Sum)  # 65528 bytes
np.testing.assert_array_equal(got[1], np.full(8191, n + n * (n - 1), np.float32))
single = mx.nd.full((300_001,), r + 1, dtype=np.float32)
hvd.allreduce_(single, name="single", op=hvd.Sum)
np.testing.assert_array_equal(single.asnumpy(), np.full(300_001, n * (n + 1) / 2, np.float32))
assert maps("rw-s") == 0, "a group under 64 KiB, or a single array, was staged"

# From the threshold on, every dtype and op.
for elements in (8192, 150_001):
    for dt in (np.float32, np.float64, np.float16, np.int32):
        count = elements * 4 // np.dtype(dt).itemsize  # the same bytes
        base = (np.arange(count) % 97).astype(dt)
        got = pair(base, "sum.%d.%s" % (elements, np.dtype(dt).name), op=hvd.Sum)
        np.testing.assert_array_equal(got[0], (base * n + sum(range(n))).astype(dt))
        np.testing.assert_array_equal(got[1], (base * n + 2 * sum(range(n))).astype(dt))
assert maps("rw-s") == 1, maps("rw-s")
assert maps("r--s") >= n - 1, (maps("r--s"), "the peers' staging regions were not mapped")

base = np.linspace(-1, 1, 150_001, dtype=np.float32)
parts = [mx.nd.array(base * (r + 1)), mx.nd.array(base * (r + 2))]
hvd.grouped_allreduce_(parts, name="avg", op=hvd.Average, prescale_factor=2.0, postscale_factor=0.5)
np.testing.assert_allclose(parts[0].asnumpy(), base * np.mean([q + 1 for q in range(n)]), rtol=1e-5)
np.testing.assert_allclose(parts[1].asnumpy(), base * np.mean([q + 2 for q in range(n)]), rtol=1e-5)

# A group whose blocks cut across its buffers (sizes not multiples of the ranks), then a
# larger one (the region grows), each element checked.
for scale in (1, 9):
    sizes = [7 * scale, 100_003 * scale, 3, 65_537 * scale, 1]
    parts = [mx.nd.array(np.arange(m, dtype=np.float32) + 1000 * i + r) for i, m in enumerate(sizes)]
    hvd.grouped_allreduce_(parts, name="group.%d" % scale, op=hvd.Sum)
    for i, (p, m) in enumerate(zip(parts, sizes)):
        want = (np.arange(m, dtype=np.float32) + 1000 * i) * n + sum(range(n))
        np.testing.assert_array_equal(p.asnumpy(), want, err_msg="buffer %d" % i)
assert maps("rw-s") == 1, maps("rw-s")  # the old region was freed

# A bucket (a shared array) with ordinary arrays: the group is staged (not all shared).
bucket = mx.nd.from_dlpack(_core.shared_array(50_000, 2, 32))
bucket[:] = r + 1
parts = [bucket, mx.nd.full((70_000,), 2 * r, dtype=np.float32)]
hvd.grouped_allreduce_(parts, name="mixed", op=hvd.Sum)
np.testing.assert_array_equal(parts[0].asnumpy(), np.full(50_000, n * (n + 1) / 2, np.float32))
np.testing.assert_array_equal(parts[1].asnumpy(), np.full(70_000, n * (n - 1), np.float32))

# Many calls in a row reuse the region: the same result each time.
parts = [mx.nd.ones((200_000,), dtype=np.float32), mx.nd.ones((1000,), dtype=np.float32)]
for i in range(20):
    hvd.grouped_allreduce_(parts, name="again", op=hvd.Average)
for p in parts:
    np.testing.assert_array_equal(p.asnumpy(), np.ones(p.shape, np.float32))
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
