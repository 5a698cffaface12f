"""Contiguous gradient buckets: gradients kept as views into a few flat buffers.

With ``DistributedTrainer(..., gradient_as_bucket_view=True)`` every dense gradient is a
view into a flat 1-D buffer (a bucket) of at most ``bucket_cap_mb`` MiB, the idea and the
argument names of
PyTorch DDP (``DistributedDataParallel(gradient_as_bucket_view=True, bucket_cap_mb=25)``,
torch/nn/parallel/distributed.py and its Reducer). Backward writes each gradient straight
into its bucket, so the reduction is one in-place allreduce of the bucket's buffer: no
packing copies, and since a view shares its buffer's MXNet engine variable, the engine runs
that allreduce as soon as backward has written every gradient of the bucket (while it is
still computing the others).

Layout (:func:`plan_buckets`, pure logic, the same on every rank for the same parameters):
gradients are taken in the order backward produces them (last layers first); each joins
the open bucket of its (context, dtype); a gradient that would take that bucket past
``cap_bytes`` closes it and opens the next one, so a bucket holds at most ``cap_bytes``
unless one gradient alone is larger. Inside a bucket each gradient starts on a 64-byte
boundary (the gap is zeros and reduces to zeros).

:class:`GradientBuckets` allocates the buffers, copies the current gradient values in
(an accumulated ``grad_req='add'`` gradient is kept) and binds every parameter's gradient
to its view with ``autograd.mark_variables``, as ``Parameter._init_grad`` binds a fresh
gradient: at once when every parameter is initialized, else right after the first forward
has initialized the last deferred one, in both cases before the first backward. Whatever
gives a parameter a new gradient array later (``grad_req`` changed, ``cast``,
re-initialization) is noticed, and the parameter is bound again, to its old place when its
shape and dtype still fit, else to a new bucket.
"""
import mxnet as mx
import numpy as np
from mxnet import autograd

from mxhorovod.process_sets import _size as _ps_size
from mxhorovod.functions import allgather_object

__all__ = ["ALIGN_BYTES", "plan_buckets", "Bucket", "GradientBuckets", "eligible_params"]

# Every view starts on a cache line, as MXNet's own allocations do, so vectorized kernels
# (optimizer updates, MKLDNN reorders) see the same alignment as without buckets.
ALIGN_BYTES = 64


def _aligned(nbytes):
    return -(-nbytes // ALIGN_BYTES) * ALIGN_BYTES


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
        self.flat = mx.nd.zeros((self.size,), ctx=context, dtype=self.dtype)
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
    replaced (``grad_req`` switched to 'null' and back, or to 'add') it is bound again to
    the same view. Only a parameter without a fitting slot (first build, a deferred
    parameter initialized later, a new shape or dtype after ``cast``) gets a slot in a new
    bucket; a slot left behind stays in its buffer, unused (a bucket left with no slot at
    all, as after ``cast``, is dropped). Existing views are thus never replaced, which
    matters for a block hybridized with ``static_shape=True``: its cached graph keeps
    writing into the gradient arrays of its first backward even after they are replaced
    (seen with MXNet 1.9.1), so the views must be bound before that first backward;
    :meth:`for_step` detects the contrary. For that the buckets are built as soon
    as every parameter is initialized: at construction, or right after the last deferred
    parameter gets its gradient array in the first forward (``Parameter._init_grad`` is
    wrapped to tell the buckets).

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
        self.buckets = []          # buckets that hold a slot, in creation order
        self.live = []             # the buckets holding at least one bound gradient
        self._slot = {}            # parameter index -> (bucket, member position)
        self._bound = ()           # ((index, view), ...) as of the last check
        self.bound_indices = frozenset()
        self.builds = 0            # how many times new buckets were made
        self._numbers = 0          # buckets made so far
        self._replaced = []        # (parameter, former gradient array) not yet checked
        self.changed = False       # layout changed since the owner last compared ranks
        for p in params:
            if getattr(p, "_mxhorovod_buckets", None) is None:
                _wrap_init_grad(p)
            p._mxhorovod_buckets = self
        if not self._pending():
            self.current()

    def _pending(self):
        return any(p.grad_req != "null" and p._data is None for p in self._params)

    def _owns_all(self):
        return all(p._mxhorovod_buckets is self for p in self._params)

    def on_grad_init(self):
        """Called after a parameter made a new gradient array: bind it now (before its
        first backward) once no parameter waits for deferred initialization."""
        if self._owns_all() and not self._pending():
            self.current()

    def current(self):
        """The live buckets, after binding every eligible parameter to its view. Returns
        the list of live buckets; sets ``changed`` when the layout or the set of bound
        parameters changed."""
        eligible = eligible_params(self._params)
        if len(eligible) == len(self._bound) and all(
                i == j and p._grad[0] is v for (i, p), (j, v) in zip(eligible, self._bound)):
            return self.live
        if not self._owns_all():
            taken = next(p.name for p in self._params if p._mxhorovod_buckets is not self)
            raise ValueError("the gradient of Parameter '%s' is now in the buckets of a newer "
                             "DistributedTrainer (gradient_as_bucket_view=True); use that "
                             "trainer" % taken)
        newcomers = []
        for i, p in eligible:
            slot = self._slot.get(i)
            if slot is not None and slot[0].fits(slot[1], p):
                view = slot[0].views[slot[1]]
                if p._grad[0] is not view:
                    self._replaced.append((p, _rebind(p, view)))
            else:
                newcomers.append((i, p))
        if newcomers:
            self._add_buckets(newcomers)
        self._bound = tuple((i, p._grad[0]) for i, p in eligible)
        self.bound_indices = frozenset(i for i, _ in eligible)
        kept = set(id(b) for b, _ in self._slot.values())
        self.buckets = [b for b in self.buckets if id(b) in kept]
        live = set(id(self._slot[i][0]) for i in self.bound_indices)
        self.live = [b for b in self.buckets if id(b) in live]
        self.changed = True
        return self.live

    def layout(self):
        """What every rank must agree on: (bucket number, dtype, elements) of each live
        bucket and the bound parameter indices."""
        return ([(b.number, b.dtype.name, b.size) for b in self.live],
                sorted(self.bound_indices))

    def for_step(self, prefix, process_set=None):
        """The live buckets to reduce in this step, after binding every eligible parameter
        (see :meth:`current`) and two checks, each once per change. ``prefix`` names the
        trainer in errors and the collective of the layout check.

        Raises:
            RuntimeError: backward wrote a former gradient array replaced before this call
                (a static_shape cached graph bound before the buckets); nothing is reduced.
            ValueError: on every rank, the ranks' layouts differ (a blocking allgather
                compares them after each change; otherwise the ranks would wait forever
                for each other's bucket names).
        """
        # Replaced before this call: since then a backward ran, which must have written
        # the buckets, not these arrays.
        replaced, self._replaced = self._replaced, []
        buckets = self.current()
        for param, old in replaced:
            if written_since_rebind(old):
                self._rearm(replaced)
                raise RuntimeError(
                    "DistributedTrainer '%s': backward wrote the gradient of Parameter '%s' "
                    "into its former array, not into its gradient bucket: a block hybridized "
                    "with static_shape=True keeps the gradient arrays of its first backward. "
                    "Make the DistributedTrainer before the first backward, or call "
                    "hybridize(...) on the block again (then backward writes the buckets); "
                    "nothing was reduced or updated in this step" % (prefix, param.name))
        if self.changed and _ps_size(process_set, "DistributedTrainer") > 1:
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
        its block again) and keeps ``replaced`` (NaN again) for the next check."""
        for i in sorted(self.bound_indices):
            p = self._params[i]
            _mark(p, p._grad)
        with autograd.pause():
            for _, old in replaced:
                old[:] = np.nan
        self._replaced = list(replaced) + self._replaced

    def _add_buckets(self, members):
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
                self._replaced.append((p, _rebind(p, bucket.views[k])))
                self._slot[i] = (bucket, k)
            self.buckets.append(bucket)
        self.builds += 1


def _wrap_init_grad(param):
    """Makes ``param._init_grad`` (called when its gradient array is made: deferred
    initialization in the first forward, grad_req changes, re-initialization) tell the
    parameter's current GradientBuckets afterwards."""
    original = param._init_grad

    def init_grad_then_bind():
        original()
        param._mxhorovod_buckets.on_grad_init()

    param._init_grad = init_grad_then_bind


def written_since_rebind(old):
    """Whether the former gradient ``old`` (filled with NaN by the rebinding) was written
    since: then backward still writes there, not into the bucket. Waits for ``old``."""
    if not np.issubdtype(np.dtype(old.dtype), np.floating):
        return False  # no NaN to detect a write with; integer gradients are rare
    return not np.isnan(old.asnumpy()).all()


def _rebind(param, view):
    """Makes ``view`` the gradient of ``param``, keeping its value and freshness. Returns
    the former gradient array, filled with NaN after its value was copied: a reference
    kept to it shows NaN instead of silently stale values, and
    :func:`written_since_rebind` tells whether some cached graph still writes there."""
    old = param._grad[0]
    # An engine copy, ordered after any pending backward write of the old gradient: the
    # gradient of this step (or the sum so far with grad_req='add') is kept. Paused: this
    # may run inside the user's autograd.record() (deferred init in the first forward).
    with autograd.pause():
        view[:] = old
        if np.issubdtype(np.dtype(old.dtype), np.floating):
            old[:] = np.nan
    param._grad = [view]
    _mark(param, param._grad)
    return old


def _mark(param, grads):
    """Binds ``grads`` as the gradients of ``param``'s data, as Parameter._init_grad does.
    Marking creates a new autograd entry whose fresh-gradient flag is unset; Trainer reads
    that flag in update() (stale-gradient check), so it is carried over."""
    data = param._check_and_get(param._data, list)
    fresh = [d._fresh_grad for d in data]
    autograd.mark_variables(data, grads, param.grad_req)
    for d, f in zip(data, fresh):
        d._fresh_grad = f
