"""A rank that becomes unreadable after init (PR_SET_DUMPABLE 0 on job rank 1, and job rank
2 without CAP_SYS_PTRACE, which root would otherwise use to read it anyway): the
cross-memory-attach allreduce of the process set [1, 2] must fail on both members with the
tensor's name and job ranks (not the set's), then the job goes on. 3 ranks.
Prints RANK <r> OK."""
import ctypes
import os

import mxnet as mx
import numpy as np

import mxhorovod as hvd

libc = ctypes.CDLL(None, use_errno=True)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_sys_ptrace():
    header, data = CapHeader(0x20080522, 0), (CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    assert libc.capget(ctypes.byref(header), data) == 0, ctypes.get_errno()
    data[0].effective &= ~(1 << 19)  # CAP_SYS_PTRACE
    assert libc.capset(ctypes.byref(header), data) == 0, ctypes.get_errno()


# Capabilities are per thread: dropped before init(), so the background thread (made by
# init) has it dropped too. Rank 1 is still readable during init's probe.
if os.environ.get("PMI_RANK") == "2":
    drop_sys_ptrace()
pair = hvd.ProcessSet([1, 2])
hvd.init(process_sets=[pair])
r = hvd.rank()
assert hvd.size() == 3, "run on 3 ranks"
if r == 1:
    assert libc.prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE 0
hvd.allreduce(mx.nd.ones((1,)), name="ready").wait_to_read()  # both changes made
if pair.included():
    want = {2: "allreduce 'q': reading rank 1's buffer (process_vm_readv) failed",
            1: "allreduce 'q': ranks 2 could not read their peers' buffers"}[r]
    try:
        hvd.allreduce(mx.nd.ones((100000,)), op=hvd.Sum, name="q", process_set=pair).wait_to_read()
        raise AssertionError("rank %d: the allreduce did not fail" % r)
    except mx.base.MXNetError as e:
        assert want in str(e), (r, str(e)[:500])
y = hvd.allreduce(mx.nd.ones((3,)) * (r + 1), op=hvd.Sum, name="after")
np.testing.assert_array_equal(y.asnumpy(), np.full((3,), 6.0, "float32"))
print("RANK %d OK" % r, flush=True)
hvd.shutdown()
