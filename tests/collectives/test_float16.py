"""float16 reductions, scaling and casts (src/ops/float16.h): the kernels on every path
against numpy for every float16 value, the paths bit-identical, the cast's engine operation
against MXNet's cast, and allreduce on 2 ranks with every op that takes float16 on the
vector path and on the portable one (MXHOROVOD_SIMD)."""
import ctypes

import numpy as np
import pytest

from mxhorovod_devtools.mpirun import run_ranks

SUM, MIN, MAX, PRODUCT, SCALED_SUM, SCALE, CAST_TO_HALF, CAST_TO_FLOAT = range(8)
PORTABLE, AVX2 = 0, 1
NAN_BITS = 0x7E00  # every NaN result: numpy's float16 nan


@pytest.fixture(scope="module")
def kernel():
    from mxhorovod import _core
    fn = ctypes.CDLL(_core.__file__).mxhorovod_float16_kernel
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_int64, ctypes.c_double]
    fn.restype = ctypes.c_int

    def run(path, k, a, b, scale=1.0):
        """inout = b's copy; returns it (uint16; uint32 for CAST_TO_FLOAT), or None when
        this CPU lacks the path. CAST_TO_HALF reads a as uint32 (float32 bits)."""
        a = np.ascontiguousarray(a, dtype=np.uint32 if k == CAST_TO_HALF else np.uint16)
        out = np.array(b, dtype=np.uint32 if k == CAST_TO_FLOAT else np.uint16)
        rc = fn(path, k, a.ctypes.data, out.ctypes.data, a.size, scale)
        assert rc in (0, -1), rc
        return out if rc == 0 else None
    return run


def _f32(bits):
    return bits.view(np.float16).astype(np.float32)


def _h(f32):
    """float32 -> float16 bits, nearest even (numpy), NaN as NAN_BITS."""
    with np.errstate(all="ignore"):
        out = f32.astype(np.float16).view(np.uint16).copy()
    out[np.isnan(f32)] = NAN_BITS
    return out


def expected(k, a_bits, b_bits, scale=1.0):
    """The kernel's result by numpy: float32 arithmetic, rounded to float16."""
    a, b = _f32(a_bits), _f32(b_bits)
    c = np.float32(scale)
    with np.errstate(all="ignore"):
        if k == SUM:
            return _h(a + b)
        if k == PRODUCT:
            return _h(a * b)
        if k == SCALED_SUM:
            return _h(_f32(_h(a + b)) * c)
        if k == SCALE:
            return _h(a * c)
        r = np.minimum(a, b) if k == MIN else np.maximum(a, b)
        zeros = (a == 0) & (b == 0)  # -0 below +0, whichever operand holds it
        neg = np.signbit(a) | np.signbit(b) if k == MIN else np.signbit(a) & np.signbit(b)
        r[zeros] = np.where(neg[zeros], np.float32(-0.0), np.float32(0.0))
        return _h(r)


def _operands():
    """Every float16 value against special and random values: (a, b) bit arrays."""
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    special = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x83FF, 0x3C00, 0xBC00,
               0x3C01, 0x7BFF, 0xFBFF, 0x7BFE, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01,
               0x7D55, 0xFFFF, 0x3555, 0x0200, 0x5640]
    rng = np.random.default_rng(36)
    others = np.concatenate([np.array(special, np.uint16), rng.integers(0, 1 << 16, 12, dtype=np.uint16)])
    a = np.tile(every, others.size)
    b = np.repeat(others, every.size)
    return a, b


@pytest.mark.parametrize("k,scale", [(SUM, 1.0), (MIN, 1.0), (MAX, 1.0), (PRODUCT, 1.0),
                                     (SCALED_SUM, 0.5), (SCALED_SUM, 1 / 3), (SCALE, 1 / 3),
                                     (SCALE, -3.0), (SCALE, 1e-6), (SCALE, 65504.0)])
def test_kernels_match_numpy_for_every_value_on_every_path(kernel, k, scale):
    # Both operand orders: a kernel computing op(b, a) instead would pass one of them only
    # for Min/Max with NaN payloads or signed zeros.
    a, b = _operands()
    ran = 0
    for x, y in ((a, b), (b, a)):
        want = expected(k, x, y, scale)
        for path in (PORTABLE, AVX2):
            got = kernel(path, k, x, y, scale)
            if got is None:
                continue
            ran += 1
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, "path %d kernel %d scale %r: %d wrong, first a=%04x b=%04x " \
                "got %04x want %04x" % (path, k, scale, bad.size, x[bad[0]], y[bad[0]],
                                         got[bad[0]], want[bad[0]])
    assert ran >= 2  # the portable path at least, both orders


def test_paths_bit_identical_at_every_length_and_offset(kernel):
    if kernel(AVX2, SUM, np.zeros(1, np.uint16), np.zeros(1, np.uint16)) is None:
        pytest.skip("this CPU has no AVX2 + F16C: the portable path only")
    rng = np.random.default_rng(7)
    base_a = rng.integers(0, 1 << 16, 5000, dtype=np.uint16)
    base_b = rng.integers(0, 1 << 16, 5000, dtype=np.uint16)
    # Lengths around the vector width (16 per step) and unaligned starts exercise the tails.
    for n in list(range(0, 50)) + [255, 1001, 4097]:
        for off in (0, 1, 3):
            a, b = base_a[off:off + n], base_b[off:off + n]
            for k, scale in ((SUM, 1.0), (MIN, 1.0), (MAX, 1.0), (PRODUCT, 1.0),
                             (SCALED_SUM, 0.25), (SCALE, 0.1)):
                p, v = kernel(PORTABLE, k, a, b, scale), kernel(AVX2, k, a, b, scale)
                assert np.array_equal(p, v), (n, off, k)
                assert np.array_equal(v, expected(k, a, b, scale)), (n, off, k)


def _float32_patterns():
    """float32 bit patterns for the cast to float16: every value of the top 19 bits (sign,
    exponent, float16's mantissa and the rounding bit) with low bits that make ties, just
    below and just above (NaN payloads, Inf, subnormals and overflow among them), plus
    random floats of every magnitude."""
    top = np.arange(1 << 19, dtype=np.uint32) << 13
    rng = np.random.default_rng(16)
    rand = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([top, top | 0x1000, top | 0x0FFF, top | 0x1001, top | 1, rand])


def test_casts_match_numpy_on_every_path(kernel):
    # numpy's astype is what MXNet's cast gives (checked below through the engine):
    # nearest even, NaN payloads kept (0x7C01 when the kept bits are zero), never quieted.
    f32 = _float32_patterns()
    with np.errstate(all="ignore"):
        want_h = f32.view(np.float32).astype(np.float16).view(np.uint16)
    every_h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    want_f = every_h.view(np.float16).astype(np.float32).view(np.uint32)
    ran = 0
    for path in (PORTABLE, AVX2):
        got_h = kernel(path, CAST_TO_HALF, f32, np.zeros(f32.size, np.uint16))
        if got_h is None:
            continue
        ran += 1
        bad = np.flatnonzero(got_h != want_h)
        assert bad.size == 0, "path %d: %d wrong, first %08x -> %04x, want %04x" % (
            path, bad.size, f32[bad[0]], got_h[bad[0]], want_h[bad[0]])
        got_f = kernel(path, CAST_TO_FLOAT, every_h, np.zeros(every_h.size, np.uint32))
        bad = np.flatnonzero(got_f != want_f)
        assert bad.size == 0, "path %d: %d wrong, first %04x -> %08x, want %08x" % (
            path, bad.size, every_h[bad[0]], got_f[bad[0]], want_f[bad[0]])
        # Every length and offset around the vector width: the tails and a NaN in a block.
        for n in list(range(0, 40)) + [1001]:
            for off in (0, 1, 5):
                src = f32[(1 << 19) - 20 + off:][:n]  # the NaN and Inf patterns of the top
                assert np.array_equal(kernel(path, CAST_TO_HALF, src, np.zeros(n, np.uint16)),
                                      want_h[(1 << 19) - 20 + off:][:n]), (path, n, off)
    assert ran >= 1


def test_cast_engine_operation_matches_mxnet(kernel):
    import mxnet as mx
    from mxhorovod import _core
    from mxhorovod.common.errors import InvalidArgumentError
    f32 = _float32_patterns()[::3].view(np.float32)
    src = mx.nd.array(f32, dtype=np.float32)
    half = mx.nd.empty(src.shape, dtype=np.float16)
    _core.cast(src.handle.value, half.handle.value, 0)
    want = mx.nd.cast(src, dtype="float16")
    assert np.array_equal(half.asnumpy().view(np.uint16), want.asnumpy().view(np.uint16))
    back = mx.nd.empty(src.shape, dtype=np.float32)
    _core.cast(half.handle.value, back.handle.value, 0)
    want = mx.nd.cast(half, dtype="float32")
    assert np.array_equal(back.asnumpy().view(np.uint32), want.asnumpy().view(np.uint32))
    # Engine order: a cast reads what the operation before it wrote, and a later reader
    # sees the cast's result (no wait in between).
    x = mx.nd.ones((1000, 7)) * 3
    h = mx.nd.empty((1000, 7), dtype=np.float16)
    y = x * 2
    _core.cast(y.handle.value, h.handle.value, 0)
    del y  # the operation holds its own reference until it has run
    assert float((h.astype("float32") + 1).sum().asscalar()) == 7 * 7000
    bad = [(src, mx.nd.empty(src.shape, dtype=np.float64), "from float32 into float64"),
           (src, mx.nd.empty((3,), dtype=np.float16), "elements and the output 3"),
           (mx.nd.ones((4,), dtype=np.int32), mx.nd.empty((4,), dtype=np.float16),
            "from int32 into float16"),
           (half, half, "from float16 into float16")]
    for a, b, text in bad:  # (a and b alive during the call: a handle is not a reference)
        with pytest.raises(InvalidArgumentError, match=text):
            _core.cast(a.handle.value, b.handle.value, 0)


def test_fp16_wire_path_of_an_array_in_mkldnn_layout():
    # Outside a gradient reduction, Compression.fp16's casts of a weight that MKLDNN holds
    # in its own layout (a 64-channel conv after an inference-mode forward), from it and
    # into it, give mx.nd.cast's bits (the engine operation cannot read that layout).
    import mxnet as mx
    import mxhorovod as hvd
    from mxhorovod.training.compression import wire_path
    compress, decompress_into = wire_path(hvd.Compression.fp16)
    conv = mx.gluon.nn.Conv2D(64, 3, in_channels=64)
    conv.initialize()
    x = mx.nd.ones((1, 64, 8, 8))
    conv(x).wait_to_read()
    w = conv.weight.data()
    sent, ctx = compress(w, {}, 0)
    want = mx.nd.cast(w, dtype="float16")
    assert sent.asnumpy().tobytes() == want.asnumpy().tobytes()
    half = mx.nd.array(np.random.RandomState(2).randn(*w.shape), dtype=np.float16)
    conv(x).wait_to_read()
    decompress_into(half, ctx, w)
    assert w.asnumpy().tobytes() == half.astype("float32").asnumpy().tobytes()


def test_cast_failing_when_it_runs_names_its_tensor():
    # In a gradient reduction (the trainer's path) the engine operation runs even on an
    # array in MKLDNN's layout, and fails: the error names the tensor and the array.
    import mxnet as mx
    from mxhorovod.training.compression import _cast
    from mxhorovod.collectives.ops import gradient_reduction
    conv = mx.gluon.nn.Conv2D(64, 3, in_channels=64)
    conv.initialize()
    conv(mx.nd.ones((1, 64, 8, 8))).wait_to_read()
    w = conv.weight.data()
    half = mx.nd.empty(w.shape, dtype=np.float16)
    with gradient_reduction():
        _cast(w, half, True, "DistributedTrainer.0.3")
    with pytest.raises(mx.base.MXNetError, match="cast 'DistributedTrainer.0.3' input: ") as e:
        half.asnumpy()
    assert "wait_to_read() does not change the layout" in str(e.value)


def _run_allreduce(tmp_path, simd):
    out = tmp_path / ("bits." + simd)
    env = {"MXHOROVOD_SIMD": simd, "HOROVOD_LOG_LEVEL": "debug"}
    proc = run_ranks(2, "float16_ops.py", [str(out)], timeout=240, env=env)
    return proc.stdout, out.read_bytes()


def test_allreduce_every_op_on_both_paths_bit_identical(tmp_path):
    # Every op, prescale/postscale, odd lengths, alone and fused, below and above the
    # cross-memory-attach threshold: values on each rank checked against numpy by the
    # worker, then the two paths' results compared bit for bit.
    out_portable, portable = _run_allreduce(tmp_path, "portable")
    assert "float16 kernels: portable" in out_portable
    out_auto, auto = _run_allreduce(tmp_path, "auto")
    assert "float16 kernels: " in out_auto
    assert len(portable) > 0 and portable == auto
