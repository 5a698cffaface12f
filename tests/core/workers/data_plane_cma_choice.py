"""Which data path the ranks agree on for allreduce (ops/cma_backend.h), and that results are
right whichever it is. Argument: the case.
- "off1": rank 1 sets MXHOROVOD_CMA=0, so every rank must use MPI only (a rank alone on
  cross-memory attach would wait for peers that never join its exchanges);
- "minmix": ranks set different MXHOROVOD_CMA_MIN_BYTES (rank r: (r + 1) * 256 KiB), and
  buffers of sizes between the thresholds must take one path on all ranks (the largest);
- "sets": default settings, with a process set of ranks [0, 1] beside the global set.
Each rank reduces float32 buffers of 1 KiB .. 4 MiB (Sum, Average, postscale) and a group of
3000 small tensors, and two arrays over one buffer, against numpy. The test reads the path chosen from the debug log. Prints RANK <r> OK."""
import os
import sys

case = sys.argv[1]
rank_env = int(os.environ.get("PMI_RANK", "0"))
if case == "off1" and rank_env == 1:
    os.environ["MXHOROVOD_CMA"] = "0"
if case == "minmix":
    os.environ["MXHOROVOD_CMA_MIN_BYTES"] = str((rank_env + 1) * 256 * 1024)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

import mxhorovod as hvd  # noqa: E402

pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair] if case == "sets" else None)
r, n = hvd.rank(), hvd.size()


def check(process_set, tag):
    size, me = process_set.size(), process_set.rank()
    for k, elems in enumerate([256, 65536 + 3, 100000, 200003, 1 << 20]):
        xs = [np.random.RandomState(31 * k + q).uniform(-2, 2, elems).astype("float32")
              for q in range(size)]
        want = np.sum(np.stack(xs).astype(np.float64), axis=0)
        for op, post, exp in [(hvd.Sum, 1.0, want), (hvd.Average, 1.0, want / size),
                              (hvd.Sum, 0.5, want * 0.5)]:
            x = mx.nd.array(xs[me])
            y = hvd.allreduce(x, op=op, postscale_factor=post, process_set=process_set,
                              name="%s.%d.%s.%g" % (tag, elems, op, post)).asnumpy()
            np.testing.assert_allclose(y, exp, rtol=1e-5, atol=1e-5,
                                       err_msg="rank %d %s %d elements" % (r, tag, elems))
            # In place, a tensor alone in its response: reduced in the array itself.
            hvd.allreduce_(x, op=op, postscale_factor=post, process_set=process_set,
                           name="%s.inplace.%d.%s.%g" % (tag, elems, op, post))
            np.testing.assert_allclose(x.asnumpy(), exp, rtol=1e-5, atol=1e-5)


def check_group(process_set, tag):
    # 3000 tensors of 16 float32 (192 KB): one group reduced in place, each rank's block
    # spanning more buffers than one process_vm_readv takes (IOV_MAX, 1024); out of place
    # and in place, with a prescale.
    size, me = process_set.size(), process_set.rank()
    xs = [np.random.RandomState(7 + q).uniform(-2, 2, (3000, 16)).astype("float32")
          for q in range(size)]
    want = np.sum(np.stack(xs).astype(np.float64), axis=0) * 0.25 / size
    arrays = [mx.nd.array(row) for row in xs[me]]
    outs = hvd.grouped_allreduce(arrays, op=hvd.Average, prescale_factor=0.25,
                                 process_set=process_set, name=tag + ".group")
    hvd.grouped_allreduce_(arrays, op=hvd.Average, prescale_factor=0.25,
                           process_set=process_set, name=tag + ".group_")
    for got in (np.stack([o.asnumpy() for o in outs]), np.stack([a.asnumpy() for a in arrays])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg="rank %d %s" % (r, tag))


def check_aliases(process_set, tag):
    # Two MXNet arrays over one buffer (the grouped calls refuse views of one array, not
    # this), in one group and as two calls: no half-reduced bytes.
    size, me = process_set.size(), process_set.rank()
    xs = [np.random.RandomState(11 + q).randint(-9, 9, 200000).astype("float32") for q in range(size)]
    want = np.sum(np.stack(xs), axis=0)
    for k in range(2):
        a = xs[me].copy()
        A, B = mx.nd.from_numpy(a, zero_copy=True), mx.nd.from_numpy(a, zero_copy=True)
        if k == 0:
            hvd.grouped_allreduce_([A, B], op=hvd.Sum, name="%s.alias" % tag, process_set=process_set)
        else:
            hvd.allreduce_(A, op=hvd.Sum, name="%s.alias.a" % tag, process_set=process_set)
            hvd.allreduce_(B, op=hvd.Sum, name="%s.alias.b" % tag, process_set=process_set)
        # A's result is defined once every call writing its memory finished: B's own
        # operation (another engine variable over the same bytes) may still run after A's.
        B.wait_to_read()
        got = A.asnumpy()
        # Reduced together (a fusion buffer) every array gets the sum; reduced one after the
        # other (two cycles, or the MPI path's in-place tensors of a group) the second
        # reduces the first's result. Anything else is half-reduced bytes.
        ok = np.array_equal(got, want) or np.array_equal(got, want * size)
        assert ok, ("rank %d %s aliases %d" % (r, tag, k), got[:8], want[:8])


check(hvd.global_process_set, "global")
check_group(hvd.global_process_set, "global")
check_aliases(hvd.global_process_set, "global")
if case == "sets" and pair.included():
    check(pair, "pair")
    check_group(pair, "pair")
hvd.allreduce(mx.nd.ones((1,)), name="end").wait_to_read()
print("RANK %d OK" % r, flush=True)
hvd.shutdown()
