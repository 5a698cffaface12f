"""Contiguous gradient buckets: gradients kept as views into a few flat buffers.

With ``DistributedTrainer(..., gradient_as_bucket_view=True)`` every dense gradient is a
view into a flat 1-D buffer of at most ``bucket_cap_mb`` MiB (PyTorch DDP's idea and names).
Backward writes each gradient into its bucket; the reduction is one in-place allreduce per
bucket, which the engine runs once backward has written all of it.
:func:`plan_buckets` (pure, the same on every rank for the same parameters) takes the
gradients in backward's order, per (context, dtype), and opens a new bucket before one
would pass ``cap_bytes``; each gradient starts on a 64-byte boundary (the gaps are zeros).
:class:`GradientBuckets` allocates the buffers (on the CPU in host shared memory), copies
the current gradients in and binds each gradient to its view (``autograd.mark_variables``).
A binding reaches only what autograd records afterwards: a parameter is bound before its
data is first taken for a forward, never while a recorded graph may still run backward.
Layers recorded before the last deferred initialization are bound at the step, their
gradients copied into the views first.
A parameter given a new gradient array (``grad_req``, ``cast``, ``reset_ctx``,
re-initialization) is bound again: to its old place when shape, dtype and context fit,
else to a new bucket.
"""
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd

import mxhorovod._core as _core
from mxhorovod.common.process_sets import set_size
from mxhorovod.collectives.objects import allgather_object

__all__ = ["ALIGN_BYTES", "plan_buckets", "Bucket", "GradientBuckets", "eligible_params"]

# Every view starts on a cache line, as MXNet's own allocations do, so vectorized kernels
# (optimizer updates, MKLDNN reorders) see the same alignment as without buckets.
ALIGN_BYTES = 64


def _aligned(nbytes):
    return -(-nbytes // ALIGN_BYTES) * ALIGN_BYTES


# DLPack type codes (dlpack.h: kDLInt, kDLUInt, kDLFloat) of numpy's kinds.
_DLPACK_CODES = {"i": 0, "u": 1, "f": 2}


def _flat_zeros(size, context, dtype):
    """A zero-filled 1-D buffer of ``size`` elements for a bucket. On the CPU it lies in
    shared memory that the other ranks of this host map (``_core.shared_array``, handed to
    MXNet without a copy by DLPack): their allreduce reads it with plain loads instead of
    ``process_vm_readv``, about twice as fast.
    Elsewhere, or when no shared memory can be had, an ordinary ``mx.nd.zeros``."""
    code = _DLPACK_CODES.get(dtype.kind)
    if context == mx.cpu(0) and code is not None and size > 0:
        capsule = _core.shared_array(size, code, dtype.itemsize * 8)
        if capsule is not None:
            return mx.nd.from_dlpack(capsule)
    return mx.nd.zeros((size,), ctx=context, dtype=dtype)


def plan_buckets(items, cap_bytes):
    """Assign gradients to buckets.

    Args:
        items: list of ``(key, group, nbytes)`` in the order backward produces the
            gradients; ``group`` is any hashable (a (context, dtype) pair) that must match
            inside a bucket; ``nbytes`` > 0.
        cap_bytes: the most bytes of one bucket (>= 0), counted with the 64-byte alignment
            of each member; a single larger gradient gets a bucket of its own.
    Returns:
        A list of buckets, each a list of keys in the given order; buckets are ordered by
        their first member, so the bucket that backward completes first tends to come
        first.
    Raises:
        ValueError: ``cap_bytes`` < 0 or an item with ``nbytes`` <= 0.
    """
    if cap_bytes < 0:
        raise ValueError("bucket cap must be >= 0 bytes, got %r" % (cap_bytes,))
    buckets = []       # [first position, group, [keys], bytes]
    open_by_group = {}
    for pos, (key, group, nbytes) in enumerate(items):
        if nbytes <= 0:
            raise ValueError("gradient %r has %r bytes; a bucket member needs at least one"
                             % (key, nbytes))
        size = _aligned(nbytes)
        bucket = open_by_group.get(group)
        if bucket is not None and bucket[3] + size > cap_bytes:
            bucket = None
        if bucket is None:
            bucket = [pos, group, [], 0]
            buckets.append(bucket)
            open_by_group[group] = bucket
        bucket[2].append(key)
        bucket[3] += size
    return [b[2] for b in buckets]


def eligible_params(params):
    """The (index, Parameter) pairs whose gradient can live in a bucket: grad_req 'write'
    or 'add', initialized (a deferred parameter after its first forward), a dense
    gradient, one context."""
    out = []
    for i, p in enumerate(params):
        if (p.grad_req != "null" and p._grad is not None and len(p._grad) == 1
                and p._grad_stype == "default"):
            out.append((i, p))
    return out


class Bucket(object):
    """One flat buffer and the gradients that are views into it.

    Attributes:
        number: stable number in creation order (used in collective names).
        flat: 1-D NDArray of ``size`` elements of ``dtype`` on ``context``.
        indices: the trainer's parameter indices of the members, in layout order.
        offsets: element offset of each member's view in ``flat``.
        views: each member's gradient (a view of ``flat`` with the parameter's shape).
    """

    def __init__(self, number, members, dtype, context):
        self.number = number
        self.dtype = np.dtype(dtype)
        self.context = context
        esize = self.dtype.itemsize
        self.indices, self.offsets = [], []
        offset = 0
        for i, p in members:
            self.indices.append(i)
            self.offsets.append(offset)
            offset += _aligned(int(np.prod(p.shape)) * esize) // esize
        self.size = offset
        # Zeros: the alignment gaps must reduce to zeros and never hold garbage (nan).
        self.flat = _flat_zeros(self.size, context, self.dtype)
        self.views = []
        for (i, p), off in zip(members, self.offsets):
            n = int(np.prod(p.shape))
            # Basic slicing of a 1-D NDArray and reshape both share the buffer (and its
            # engine variable): no copy.
            view = self.flat[off:off + n].reshape(p.shape)
            if isinstance(p._grad[0], mx.np.ndarray):
                view = view.as_np_ndarray()
            self.views.append(view)

    def fits(self, k, param):
        """Whether member k's view can be ``param``'s gradient (same shape, dtype, context)."""
        g = param._grad[0]
        v = self.views[k]
        return (tuple(v.shape) == tuple(param.shape) and np.dtype(g.dtype) == self.dtype
                and g.context == self.context)

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize


class GradientBuckets(object):
    """The buckets of one trainer's parameters, bound as their gradients.

    A parameter keeps its place (slot) once it has one: when its gradient array is
    replaced (``grad_req`` switched to 'null' and back, or to 'add', re-initialization) it
    is bound again to the same view. Only a parameter without a fitting slot (first build,
    a deferred parameter initialized later, a new shape, dtype or context after ``cast`` or
    ``reset_ctx``) gets a slot in a new bucket; a slot left behind stays in its buffer,
    unused (a bucket left with no slot at all, as after ``cast``, is dropped). Existing
    views are thus never replaced, which matters for a block hybridized with
    ``static_shape=True``: its cached graph keeps writing into the gradient arrays of its
    first backward even after they are replaced (seen with MXNet 1.9.1), so the views must
    be bound before that first backward; :meth:`for_step` detects the contrary.

    When to bind (see the module docstring): a parameter given a new gradient array
    (``Parameter._init_grad`` and ``Parameter.cast`` are wrapped to tell the buckets) is
    bound, with every other such parameter, when its data is next taken
    (``Parameter._check_and_get`` is wrapped too), at the latest in :meth:`for_step`.
    New buckets are laid out once no parameter waits for deferred initialization, so one
    layout covers them all. A parameter whose data is taken while autograd records and
    some other parameter still waits for deferred initialization cannot wait for that
    layout without being recorded with its former gradient: it is bound in
    :meth:`for_step` (after this step's backward wrote the former array, whose value is
    copied into the view), except when a ``static_shape`` cached graph takes it (that
    graph would keep the former array): then the parameters initialized so far are laid
    out and bound at once.

    A parameter's gradient lives in the buckets of one trainer: a newer GradientBuckets
    over the same parameter takes it over, and the older one then raises ValueError when
    used (it would rebind the gradients back and forth every step).

    Args:
        params: the trainer's list of Parameters.
        priorities: one engine priority per parameter (higher: produced earlier by
            backward); a new bucket's layout follows decreasing priority, ties in list
            order.
        cap_bytes: see :func:`plan_buckets`.
    """

    def __init__(self, params, priorities, cap_bytes):
        self._params = params
        self._priorities = priorities
        self._cap_bytes = cap_bytes
        self._index = {id(p): i for i, p in enumerate(params)}
        self.buckets = []          # buckets that hold a slot, in creation order
        self.live = []             # the buckets holding at least one bound gradient
        self._slot = {}            # parameter index -> (bucket, member position)
        self._bound = ()           # ((index, view), ...) as of the last binding
        self.bound_indices = frozenset()
        self.builds = 0            # how many times new buckets were made
        self._numbers = 0          # buckets made so far
        self._replaced = []        # (parameter, former gradient, NaN-filled) not yet checked
        self._recorded = set()     # indices recorded unbound in this step: bound in for_step
        self._dirty = True         # some gradient array may be new (unbound)
        self._busy = False         # binding or making a gradient: data hooks stay quiet
        self.changed = False       # layout changed since the owner last compared ranks
        for p in params:
            if getattr(p, "_mxhorovod_buckets", None) is None:
                _install_hooks(p)
            p._mxhorovod_buckets = self
        if not self._pending():
            self.current()

    def _pending(self):
        return any(p.grad_req != "null" and p._data is None for p in self._params)

    def _owns_all(self):
        return all(p._mxhorovod_buckets is self for p in self._params)

    def on_new_grad(self):
        """Called after a parameter got a new gradient array (``_init_grad``, ``cast``):
        it is bound when its data is next taken, or in :meth:`for_step`."""
        self._dirty = True

    def on_use(self, param):
        """Called when ``param``'s data is taken while some gradient may be unbound: binds
        the unbound gradients now when nothing waits for deferred initialization; else
        notes ``param`` when autograd records it unbound (see the class docstring)."""
        if not self._owns_all():
            return  # for_step raises
        if not self._pending():
            self._bind(final=False)
            return
        if not autograd.is_recording():
            return  # nothing recorded: it can still be bound before its use
        i = self._index.get(id(param))
        if i is None or i in self._recorded or not self._unbound(i, param):
            return
        taker = _cached_graph_taking_data()
        if taker == "probe":
            return  # _build_cache only checks that the data exists
        if taker == "static_shape":
            self._bind(final=False)  # before that graph's first backward
        else:
            self._recorded.add(i)

    def _unbound(self, i, p):
        if not (p.grad_req != "null" and p._grad is not None and len(p._grad) == 1
                and p._grad_stype == "default"):
            return False
        slot = self._slot.get(i)
        return slot is None or p._grad[0] is not slot[0].views[slot[1]]

    def current(self):
        """The live buckets, after binding every eligible parameter to its view. Returns
        the list of live buckets; sets ``changed`` when the layout or the set of bound
        parameters changed."""
        return self._bind(final=True)

    def _bind(self, final):
        """Binds the eligible parameters (but, unless ``final``, those recorded unbound in
        this step) to their views, making buckets for those without a fitting slot."""
        eligible = eligible_params(self._params)
        if final and not self._recorded and len(eligible) == len(self._bound) and all(
                i == j and p._grad[0] is v for (i, p), (j, v) in zip(eligible, self._bound)):
            self._dirty = False
            return self.live
        if not self._owns_all():
            taken = next(p.name for p in self._params if p._mxhorovod_buckets is not self)
            raise ValueError("the gradient of Parameter '%s' is now in the buckets of a newer "
                             "DistributedTrainer (gradient_as_bucket_view=True); use that "
                             "trainer" % taken)
        wait = set() if final else self._recorded
        self._busy = True
        try:
            newcomers = []
            for i, p in eligible:
                slot = self._slot.get(i)
                if slot is not None and slot[0].fits(slot[1], p):
                    view = slot[0].views[slot[1]]
                    if p._grad[0] is not view and i not in wait:
                        self._replaced.append(_rebind(p, view))
                else:
                    newcomers.append((i, p))
            if newcomers:
                self._add_buckets(newcomers, wait)
        finally:
            self._busy = False
        if final:
            self._recorded = set()
        self._dirty = False
        bound = tuple((i, p._grad[0]) for i, p in eligible
                      if i in self._slot and p._grad[0] is self._slot[i][0].views[self._slot[i][1]])
        if newcomers or len(bound) != len(self._bound) or any(
                i != j or v is not w for (i, v), (j, w) in zip(bound, self._bound)):
            self.changed = True
        self._bound = bound
        self.bound_indices = frozenset(i for i, _ in bound)
        kept = set(id(b) for b, _ in self._slot.values())
        self.buckets = [b for b in self.buckets if id(b) in kept]
        live = set(id(self._slot[i][0]) for i in self.bound_indices)
        self.live = [b for b in self.buckets if id(b) in live]
        return self.live

    def layout(self):
        """What every rank must agree on: (bucket number, dtype, elements) of each live
        bucket and the bound parameter indices."""
        return ([(b.number, b.dtype.name, b.size) for b in self.live],
                sorted(self.bound_indices))

    def for_step(self, prefix, process_set=None):
        """The live buckets to reduce in this step, after binding every eligible parameter
        (see :meth:`current`; a gradient recorded unbound in this step is copied into its
        view first) and two checks, each once per change. ``prefix`` names the trainer in
        errors and the collective of the layout check.

        Raises:
            RuntimeError: backward wrote a former gradient array replaced before this
                step's forward used the parameter (a static_shape cached graph bound before
                the buckets); nothing is reduced.
            ValueError: on every rank, the ranks' layouts differ (a blocking allgather
                compares them after each change; otherwise the ranks would wait forever
                for each other's bucket names).
        """
        # Replaced before this call: since then a backward ran, which must have written
        # the buckets, not these arrays (a parameter recorded with its former gradient is
        # only replaced now, below).
        replaced, self._replaced = self._replaced, []
        buckets = self.current()
        for param, old, nan in replaced:
            if written_since_rebind(old, nan):
                self._rearm(replaced)
                raise RuntimeError(
                    "DistributedTrainer '%s': backward wrote the gradient of Parameter '%s' "
                    "into its former array, not into its gradient bucket: a block hybridized "
                    "with static_shape=True keeps the gradient arrays of its first backward. "
                    "Make the DistributedTrainer before the first backward, or call "
                    "hybridize(...) on the block again (then backward writes the buckets); "
                    "nothing was reduced or updated in this step" % (prefix, param.name))
        if self.changed and set_size(process_set, "DistributedTrainer") > 1:
            every = allgather_object(self.layout(), name=prefix + "bucket_layout",
                                     process_set=process_set)
            differ = [r for r, other in enumerate(every) if other != every[0]]
            if differ:
                raise ValueError(
                    "DistributedTrainer '%s': the gradient buckets differ between ranks "
                    "([(bucket, dtype, elements)], [bound parameter indices]): rank 0 %s, "
                    "rank %d %s; every rank must train the same parameters with the same "
                    "grad_req, shapes and dtypes" % (prefix, every[0], differ[0],
                                                     every[differ[0]]))
        self.changed = False
        return buckets

    def _rearm(self, replaced):
        """After backward was found writing former gradient arrays: a static cached graph
        had put them back into the parameters' autograd entries. Binds every bound
        parameter to its view again (effective once that graph is replaced, by hybridizing
        its block again) and keeps ``replaced`` (refilled) for the next check."""
        for i in sorted(self.bound_indices):
            p = self._params[i]
            _mark(p, p._grad)
        with autograd.pause():
            for _, old, nan in replaced:
                old[:] = np.nan if nan else 0
        self._replaced = list(replaced) + self._replaced

    def _add_buckets(self, members, wait=()):
        """New buckets for ``members`` [(index, Parameter)], one layout; binds them but
        those in ``wait`` (bound later, to the slot they get now)."""
        order = sorted(members, key=lambda e: (-self._priorities[e[0]], e[0]))
        items = []
        for i, p in order:
            g = p._grad[0]
            items.append((i, (str(g.context), np.dtype(g.dtype).name),
                          int(np.prod(p.shape)) * np.dtype(g.dtype).itemsize))
        by_index = dict(members)
        for keys in plan_buckets(items, self._cap_bytes):
            chosen = [(i, by_index[i]) for i in keys]
            g0 = chosen[0][1]._grad[0]
            bucket = Bucket(self._numbers, chosen, g0.dtype, g0.context)
            self._numbers += 1
            for k, (i, p) in enumerate(chosen):
                if i not in wait:
                    self._replaced.append(_rebind(p, bucket.views[k]))
                self._slot[i] = (bucket, k)
            self.buckets.append(bucket)
        self.builds += 1


def _install_hooks(param):
    """Wraps three methods of ``param`` to tell its current GradientBuckets
    (``param._mxhorovod_buckets``): ``_init_grad`` (a new gradient array: deferred
    initialization in the first forward, grad_req changes, re-initialization,
    ``reset_ctx``) and ``cast`` (new data and gradient arrays) after they ran, and
    ``_check_and_get`` when it hands out the data (``data()``, ``list_data()``, a cached
    graph's inputs) while a gradient may be unbound: the last moment to bind it before
    autograd records it."""
    init_grad, cast, check_and_get = param._init_grad, param.cast, param._check_and_get

    def init_grad_then_tell():
        buckets = param._mxhorovod_buckets
        busy, buckets._busy = buckets._busy, True  # its data is taken inside
        try:
            init_grad()
        finally:
            buckets._busy = busy
        buckets.on_new_grad()

    def cast_then_tell(dtype):
        cast(dtype)
        param._mxhorovod_buckets.on_new_grad()

    def check_and_get_then_bind(arr_list, ctx):
        if arr_list is not None and arr_list is param._data:
            buckets = param._mxhorovod_buckets
            if buckets._dirty and not buckets._busy:
                buckets.on_use(param)
        return check_and_get(arr_list, ctx)

    param._init_grad = init_grad_then_tell
    param.cast = cast_then_tell
    param._check_and_get = check_and_get_then_bind


def _cached_graph_taking_data():
    """Who takes a parameter's data (looked up only in a parameter's first forward):
    "probe" when a HybridBlock checks for deferred initialization while building its
    cached graph, "static_shape" when a cached graph hybridized with static_shape=True
    takes it as an input, else None (an imperative forward or another cached graph, which
    writes whatever gradient autograd recorded). Frames: this one, on_use, the wrapper,
    Parameter.data or list_data, then the taker."""
    frame = sys._getframe(1)
    for _ in range(6):
        frame = frame.f_back
        if frame is None:
            return None
        name = frame.f_code.co_name
        if name in ("_build_cache", "_call_cached_op"):
            block = frame.f_locals.get("self")
            if not isinstance(block, mx.gluon.HybridBlock):
                return None
            if name == "_build_cache":
                return "probe"
            return "static_shape" if dict(block._flags).get("static_shape") else None
    return None


def written_since_rebind(old, nan=True):
    """Whether the former gradient ``old`` (filled by the rebinding with NaN, or with zeros
    for grad_req='add', where backward adds into it) was written since: then backward still
    writes there, not into the bucket. Waits for ``old``."""
    if not np.issubdtype(np.dtype(old.dtype), np.floating):
        return False  # no NaN to detect a write with; integer gradients are rare
    values = old.asnumpy()
    return not np.isnan(values).all() if nan else bool(values.any())


def _rebind(param, view):
    """Makes ``view`` the gradient of ``param``, keeping its value and freshness. Returns
    ``(param, former gradient array, filled with NaN)``: after its value was copied the
    former array is filled with NaN (with zeros under grad_req='add', so an addition into
    it stays visible), so a reference kept to it shows NaN instead of silently stale
    values, and :func:`written_since_rebind` tells whether some cached graph still writes
    there."""
    old = param._grad[0]
    nan = param.grad_req != "add"
    # An engine copy, ordered after any pending backward write of the old gradient: the
    # gradient of this step (or the sum so far with grad_req='add') is kept. Paused: this
    # may run inside the user's autograd.record() (in a forward).
    with autograd.pause():
        view[:] = old
        if np.issubdtype(np.dtype(old.dtype), np.floating):
            old[:] = np.nan if nan else 0
    param._grad = [view]
    _mark(param, param._grad)
    return param, old, nan


def _mark(param, grads):
    """Binds ``grads`` as the gradients of ``param``'s data, as Parameter._init_grad does.
    Marking creates a new autograd entry whose fresh-gradient flag is unset; Trainer reads
    that flag in update() (stale-gradient check), so it is carried over."""
    data = list(param._data)  # not _check_and_get: its hook would bind again
    fresh = [d._fresh_grad for d in data]
    autograd.mark_variables(data, grads, param.grad_req)
    for d, f in zip(data, fresh):
        d._fresh_grad = f
