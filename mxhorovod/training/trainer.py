"""DistributedTrainer: a gluon.Trainer whose gradient reduction is an allreduce over ranks.

After ``allreduce_grads()`` (or inside ``step()``) every parameter's gradient is the mean
over ranks of the per-rank gradients, exactly what one process would hold for the
concatenated batch divided by the number of ranks; ``step(batch_size)`` with the per-rank
batch size then updates exactly as that one process would with the whole batch.
"""

import mxnet as mx
import numpy as np

from mxhorovod.checks.agreement import mixed_freshness, zero_stale_where_fresh_elsewhere
from mxhorovod.checks.batch_check import BatchSizeCheck
from mxhorovod.checks.layout_check import LayoutCheck
from mxhorovod.checks.parameter_check import ParameterCheck
from mxhorovod.checks.unreduced import mark_reduced, needs_reduction
from mxhorovod.collectives.ops import Adasum, Average, allreduce_, grouped_allreduce_
from mxhorovod.collectives.submit import gradient_reduction, op_name
from mxhorovod.common.naming import next_number
from mxhorovod.common.user_warning import warn_user
from mxhorovod.common.process_sets import (check_member, global_process_set, outside, set_id,
                                           set_size)
from mxhorovod.training.accumulation import Accumulation
from mxhorovod.training.adasum import AdasumDeltas
from mxhorovod.training.buckets import GradientBuckets
from mxhorovod.training.compression import Compression, wire_path
from mxhorovod.training import update_layout
from mxhorovod.training import samples
from mxhorovod.training.optimizer import DistributedOptimizer, allreduce_row_sparse_, split_list

__all__ = ["DistributedTrainer"]




class DistributedTrainer(mx.gluon.Trainer):
    """``gluon.Trainer`` for data-parallel training over all ranks.

    Args:
        params: a ``ParameterDict`` / dict (visited in sorted key order, so every rank
            numbers the parameters alike whatever the insertion order) or a list of
            Parameters (kept in the given order, which must be the same on every rank).
        optimizer: optimizer name or ``mx.optimizer.Optimizer``. A DistributedOptimizer
            is unwrapped with a warning (averaging twice would be wrong).
        optimizer_params: keyword arguments for a named optimizer.
        compression: ``Compression.none`` or ``Compression.fp16`` (floating-point
            gradients travel as float16).
        gradient_predivide_factor: gradients are multiplied by ``1/f`` before the sum and
            ``f/size`` after it: the result is the mean for any ``f``.
        prefix: prefix of the collective names (default: an automatic per-trainer prefix).
        num_groups: when > 0, dense gradients go in this many grouped allreduces (per
            dtype) instead of one allreduce per parameter (with bucket views: the buckets
            go in this many grouped allreduces instead of one allreduce per bucket).
        gradient_as_bucket_view: keyword only, beyond Horovod (PyTorch DDP's name and
            meaning). When True, every dense gradient becomes a view into a flat buffer
            (a bucket) of about ``bucket_cap_mb``, filled in backward order (last layers
            first) per dtype; each bucket is reduced by one in-place allreduce of its
            buffer, with no packing copies, and the engine starts it as soon as backward
            has written the whole bucket. Same results as without. The gradients are
            bound to their views here when every parameter is initialized, else before
            autograd records them in the first forward, and again whenever a parameter
            gets a new gradient array (``grad_req`` changed, ``cast``, ``reset_ctx``,
            re-initialization); in an imperative first forward that finishes deferred
            initializations layer by layer, the layers recorded before the last one was
            initialized are bound at the first step instead (their gradients copied into
            the views: same numbers). ``param.grad()`` then returns the view, so take it again
            rather than keeping gradient arrays from before. A parameter's gradient is in
            the buckets of one trainer: the newest one made over it. On the CPU the
            buckets lie in shared memory that the other ranks of the host map read-only
            (their allreduce reads them without ``process_vm_readv``); a process forked
            after this must not write the gradients (it shares them). See
            :mod:`mxhorovod.training.buckets`.
        process_set: the ranks that train together (default: all); the gradients are
            averaged over this set only, and every rank of it must make this trainer. On a
            rank outside the set the trainer reduces nothing: that rank trains on its own
            gradients, as one process would (Horovod's CPU build also divides them by the
            set's size there: docs/horovod_differences.md).
        bucket_cap_mb: keyword only; the most MiB (2**20 bytes) of one bucket, as in DDP
            (default 25); a single larger gradient gets a bucket of its own.
        backward_passes_per_step: keyword only; k >= 1 (default 1). Gradient accumulation,
            as Horovod's PyTorch optimizer: run k backward passes (k micro-batches), then
            call ``step(batch_size)`` once, with ``batch_size`` this rank's samples over
            the k passes. The gradients add up locally, and one allreduce per k passes
            averages their sums. That equals one process stepping on the whole batch (every
            rank, every pass). For k > 1 the trainer owns the gradients: parameters with
            ``grad_req='write'`` get ``'add'`` when the trainer is made (make it before the
            first backward), and every gradient is zeroed after each update. The manual
            pattern works too: ``allreduce_grads()``, clip, ``update(batch_size)``. A step,
            ``allreduce_grads()`` or ``update()`` after fewer than k passes raises
            ``ValueError`` saying how many are missing. The count is this process's backward
            calls (``mx.autograd.backward``, ``NDArray.backward``): with several models
            training in one process it cannot tell their passes apart. An elastic
            ``GluonState.restore()`` drops a partial sum (commits hold no gradients).
        op: keyword only; ``hvd.Average`` (default) or ``hvd.Adasum``. With Adasum, as
            Horovod's PyTorch Adasum optimizer, each rank runs the optimizer's step on its
            own gradient and the steps' changes to the weights are combined with Adasum
            (:mod:`mxhorovod.training.adasum`): the weights stay identical, the optimizer
            states (momentum, Adam's moments) stay each rank's own. Use the learning rate
            of one process (no scaling by the number of ranks). It costs two arrays the
            size of the trainable weights. Not with ``compression``,
            ``gradient_predivide_factor`` or ``gradient_as_bucket_view`` (they act on
            gradients). ``allreduce_grads()`` then reduces nothing; ``update()`` does.

    The ranks' weights stay bit-identical: updates whose result depends on MXNet's MKLDNN
    layout (NAG with momentum, centered RMSProp) run on weights put back in the plain
    layout first (:mod:`mxhorovod.training.update_layout`), and every
    ``MXHOROVOD_PARAMETER_CHECK_STEPS``-th update (default 100; 0: off) the ranks compare a
    digest of every trainable parameter, read two updates later, and warn once
    (``UserWarning``) naming the first parameter that differs and the ranks holding each
    value (:mod:`mxhorovod.checks.parameter_check`).

    Parameters with ``grad_req='null'`` are skipped; ``grad_req='add'`` accumulates
    locally and is reduced when ``step``/``allreduce_grads`` is called. row_sparse
    gradients (``Embedding(sparse_grad=True)``) are densified for the reduction and
    written back holding the rows that any rank touched, so a lazy update touches the same
    rows as one process on the whole batch would; this waits for the reduction.
    Such gradients and ``grad_req='null'`` parameters are never in a bucket.

    Raises:
        TypeError: ``optimizer`` is a Trainer, or neither a str nor an Optimizer.
        ValueError: ``op`` is neither Average nor Adasum, or Adasum with compression, a
            predivide factor or bucket views; ``MXHOROVOD_PARAMETER_CHECK_STEPS`` is not an
            integer >= 0;
            parameters are on more than one context (use one context per rank),
            here, or at a step after ``reset_ctx`` moved them onto several;
            ``bucket_cap_mb`` < 0; at the first ``step``/``allreduce_grads``, on every
            rank, when the ranks do not reduce the same parameters (a layer frozen with
            ``grad_req='null'`` or added on some ranks only; different shapes, dtypes or
            storage types: :mod:`mxhorovod.checks.layout_check`; Horovod waits forever), or were
            made with different ``num_groups``, ``gradient_as_bucket_view``,
            ``gradient_predivide_factor`` or ``MXHOROVOD_PARAMETER_CHECK_STEPS`` (naming the
            setting and each rank's value); and, at
            the first ``step``/``allreduce_grads`` after the
            buckets changed, on every rank, when the ranks' bucket layouts differ (their
            trainable parameters, shapes or dtypes differ), or when a newer trainer took
            the parameters' buckets over.
        RuntimeError: with bucket views, at the first ``step``/``allreduce_grads`` after
            the gradients were bound, when backward still wrote a former gradient array
            (a block hybridized with ``static_shape=True`` ran backward before this
            trainer was made; hybridize it again). Former gradient arrays hold NaN.
    """

    def __init__(self, params, optimizer, optimizer_params=None,
                 compression=Compression.none, gradient_predivide_factor=1.0,
                 prefix=None, num_groups=0, process_set=global_process_set, *,
                 gradient_as_bucket_view=False, bucket_cap_mb=25, backward_passes_per_step=1,
                 op=Average):
        if op not in (Average, Adasum):
            raise ValueError("DistributedTrainer: op must be hvd.Average or hvd.Adasum, got %s"
                             % op_name(op))
        if op == Adasum and (compression is not Compression.none or gradient_predivide_factor != 1.0
                             or gradient_as_bucket_view):
            raise ValueError(
                "DistributedTrainer(op=hvd.Adasum) reduces each rank's update, not its "
                "gradient: compression, gradient_predivide_factor and "
                "gradient_as_bucket_view apply to gradients and are not taken with it")
        if isinstance(optimizer, mx.gluon.Trainer):
            raise TypeError("DistributedTrainer takes an optimizer (name or "
                            "mx.optimizer.Optimizer), not a Trainer")
        if isinstance(optimizer, DistributedOptimizer):
            warn_user("DistributedTrainer does not take a DistributedOptimizer: it was "
                      "unwrapped, DistributedTrainer averages the gradients itself.")
            if backward_passes_per_step == 1:  # the wrapper's accumulation, if it has one
                backward_passes_per_step = optimizer._backward_passes_per_step
            optimizer = optimizer._optimizer
        if not isinstance(optimizer, (str, mx.optimizer.Optimizer)):
            raise TypeError("optimizer must be a str or mx.optimizer.Optimizer, got %s"
                            % type(optimizer).__name__)
        if prefix is not None and not isinstance(prefix, str):
            raise TypeError("prefix must be a str or None, got %r" % (prefix,))
        if gradient_predivide_factor <= 0:
            raise ValueError("gradient_predivide_factor must be > 0, got %r"
                             % (gradient_predivide_factor,))
        if not bucket_cap_mb >= 0:
            raise ValueError("bucket_cap_mb must be >= 0, got %r" % (bucket_cap_mb,))
        # Priority order: parameters are created in forward order, so the last ones belong
        # to the last layers, whose gradients backward produces first; they go first.
        # Taken from the given order before gluon.Trainer sorts a dict by key.
        given = list(params.values()) if isinstance(params, (dict, mx.gluon.ParameterDict)) \
            else list(params) if isinstance(params, (list, tuple)) else []
        super(DistributedTrainer, self).__init__(params, optimizer,
                                                 optimizer_params=optimizer_params,
                                                 kvstore=None)
        if self._contexts and len(self._contexts) > 1:
            raise ValueError("DistributedTrainer needs the parameters on one context per "
                             "rank, got %s: run one process per device, or use a "
                             "gluon.Trainer with hvd.DistributedOptimizer and "
                             "kvstore='device', which sums this rank's contexts first "
                             "(Horovod's DistributedTrainer reduces the first context's "
                             "gradient only)" % (self._contexts,))
        position = {id(p): k for k, p in enumerate(given)}
        n = len(self._params)
        self._priorities = [position.get(id(p), i) - n for i, p in enumerate(self._params)]
        self._compression = compression
        # The per-gradient calls of the compressor, chosen once (compression.wire_path).
        self._wire_compress, self._decompress_into = wire_path(compression)
        self._wire = {}  # the compressor's reused arrays (compress_into)
        self._wire_used = set()  # their keys used in this step
        self._gradient_predivide_factor = float(gradient_predivide_factor)
        self._prefix = prefix  # None: numbered at the first reduction (_auto_prefix)
        self._names = {}  # parameter index -> collective name (_name)
        self._num_groups = int(num_groups)
        self._process_set = process_set
        set_id(process_set, "DistributedTrainer")  # a registered set (this rank may be outside)
        # Before the buckets: grad_req 'add' re-creates the gradient arrays.
        self._accumulation = Accumulation(self._params, backward_passes_per_step) \
            if backward_passes_per_step != 1 else None
        self._buckets = GradientBuckets(self._params, self._priorities,
                                        int(bucket_cap_mb * 2**20)) \
            if gradient_as_bucket_view else None
        self._batch_check = BatchSizeCheck()
        self._samples = None  # in step(): the batch sizes' allreduce (training/samples.py)
        self._layout_check = LayoutCheck()
        self._parameter_check = ParameterCheck()
        self._settler = update_layout.Settler()
        self._adasum = AdasumDeltas() if op == Adasum else None

    def _reduce_kwargs(self):
        f = self._gradient_predivide_factor
        return dict(op=Average, prescale_factor=1.0 / f, postscale_factor=f,
                    process_set=self._process_set)

    def _reduction_settings(self):
        """The settings that decide this trainer's collectives (names, factors), which every
        rank of its set must have alike (checked with the parameters by
        :mod:`mxhorovod.checks.layout_check` before the first reduction: a grouped call on some
        ranks against single ones on others waited forever)."""
        return (("op", "Adasum" if self._adasum is not None else "Average"),
                ("num_groups", max(0, self._num_groups)),
                ("gradient_as_bucket_view", self._buckets is not None),
                ("gradient_predivide_factor", self._gradient_predivide_factor),
                # Ranks checking at other updates would wait in the check's allreduce.
                ("MXHOROVOD_PARAMETER_CHECK_STEPS", self._parameter_check.steps))

    def _name(self, i):
        # The same name every step: the core matches it in engine order, and the response
        # cache then answers the negotiation without a round trip to the coordinator.
        # Made once per parameter (this runs for every gradient of every step).
        name = self._names.get(i)
        if name is None:
            name = self._names[i] = "%s%d" % (self._prefix, i)
        return name

    def _auto_prefix(self):
        # Numbered per process set in the order trainers first reduce, not in creation
        # order: a trainer made on some ranks only, or over another set, or never stepped,
        # must not shift the names of the ones every rank steps (mxhorovod.common.naming); two
        # trainers in one process (a GAN) still never share a name.
        pid = check_member(self._process_set, "DistributedTrainer")
        self._prefix = "DistributedTrainer.%d." % next_number("DistributedTrainer", pid)

    def step(self, batch_size, ignore_stale_grad=False):
        """``gluon.Trainer.step``: average the gradients over the ranks, then update.

        With ``ignore_stale_grad=True`` the ranks first agree on which gradients are fresh
        (one small blocking allreduce of the flags): a parameter that backward used on some
        ranks only (a branch taken on some ranks) is updated on every rank, with the
        stale ranks contributing zeros, as one process on the concatenated batch would; a
        parameter stale everywhere is skipped everywhere. (Horovod averages the stale
        gradients in, and only the fresh ranks update: the ranks' weights drift apart.)

        The update uses the mean over the samples the ranks processed: the gradients are
        averaged over the ranks as always, and one small float64 allreduce of the ranks'
        ``batch_size`` (``<prefix>samples``) gives their total S, which sets the update's
        ``rescale_grad`` to ``ranks / S`` on every rank alike
        (:mod:`mxhorovod.training.samples`; the step waits for that allreduce, which
        completes once every rank has reached ``step``). Ranks may pass different sizes
        (a short last batch), and a rank that has called ``hvd.join()`` adds neither
        gradient nor samples: the step equals one process on the active ranks'
        concatenated batch, and the ranks' weights stay bit-identical. A ``batch_size``
        that is not a number >= 0 on some rank (or 0 on every rank) raises ``ValueError``
        on every rank, at the update.
        Ranks stepping with different learning rates or weight decays are warned two steps
        later, once (``UserWarning``; :mod:`mxhorovod.checks.batch_check`, one 64-byte
        allreduce per step).
        """
        if self._accumulation is not None:
            self._accumulation.check("step")
        distributed = not outside(self._process_set) and \
            set_size(self._process_set, "DistributedTrainer") > 1
        weighted = distributed and self._adasum is None
        self._check_batch_size(None if weighted else batch_size)
        self._agree_on_fresh = bool(ignore_stale_grad)
        if weighted:  # read in _update (mxhorovod.training.samples)
            if self._prefix is None:
                self._auto_prefix()
            self._samples = samples.submit(batch_size, self._prefix + "samples",
                                           self._process_set, "DistributedTrainer.step")
        try:
            # The update's rescale_grad is set from every rank's batch size in _update.
            super(DistributedTrainer, self).step(1 if weighted else batch_size,
                                                 ignore_stale_grad)
        finally:
            self._agree_on_fresh = False
            self._samples = None
        if self._accumulation is not None:
            self._accumulation.done()

    def update(self, batch_size, ignore_stale_grad=False):
        """``gluon.Trainer.update`` after ``allreduce_grads()``.

        Without ``allreduce_grads()`` since the last ``update()`` / ``step()`` (a
        single-process habit: there it does nothing), the gradients are averaged here
        first, as ``step()`` would, and a ``UserWarning`` says so once per trainer
        (:mod:`mxhorovod.checks.unreduced`; Horovod updates each rank with its own gradient and
        the ranks drift apart).

        Raises:
            ValueError: on every rank, with ``ignore_stale_grad=True``, when some gradient
                is fresh on some ranks and stale on others: the reduction has already
                averaged a stale gradient in, and the ranks would update differently (use
                ``step(..., ignore_stale_grad=True)``, which handles that case).
        """
        if self._accumulation is not None:
            self._accumulation.check("update")
        try:
            self._update_checked(batch_size, ignore_stale_grad)
        finally:
            mark_reduced(self, False)  # also when it raised: the next update must reduce
        if self._accumulation is not None:
            self._accumulation.done()

    def _update_checked(self, batch_size, ignore_stale_grad):
        distributed = not outside(self._process_set) and \
            set_size(self._process_set, "DistributedTrainer") > 1
        if distributed and needs_reduction(self, "DistributedTrainer"):
            self._agree_on_fresh = bool(ignore_stale_grad)  # as step() reduces
            try:
                self.allreduce_grads()
            finally:
                self._agree_on_fresh = False
        elif ignore_stale_grad and distributed:
            if self._prefix is None:
                self._auto_prefix()
            mixed = mixed_freshness(self._params, self._prefix + "fresh",
                                    set_size(self._process_set, "DistributedTrainer"),
                                    self._process_set)
            if mixed:
                raise ValueError(
                    "DistributedTrainer.update(ignore_stale_grad=True): the gradients of %s "
                    "are fresh on some ranks and stale on others, and allreduce_grads() has "
                    "averaged the stale ones in; use step(batch_size, ignore_stale_grad=True)"
                    % ", ".join("'%s'" % m for m in mixed))
        self._check_batch_size(batch_size, "update")
        super(DistributedTrainer, self).update(batch_size, ignore_stale_grad)

    def _update(self, ignore_stale_grad=False):
        distributed = not outside(self._process_set) and \
            set_size(self._process_set, "DistributedTrainer") > 1
        if self._samples is not None:  # in step(): the mean over the samples processed
            pending, self._samples = self._samples, None
            self._optimizer.rescale_grad = samples.rescale(
                pending, self._scale, set_size(self._process_set, "DistributedTrainer"))
        if distributed:
            # Are the ranks' weights still identical? Every N-th update, read two updates
            # later (mxhorovod.checks.parameter_check).
            if self._prefix is None:
                self._auto_prefix()
            self._parameter_check.step(self._params, self._prefix + "parameters",
                                       self._process_set, "DistributedTrainer")
        # NAG's and centered RMSProp's in-place updates give other bits on a weight that an
        # evaluation pass left in MKLDNN's layout, which depends on timing: after such a
        # pass the weights are put back in the plain layout first, so every rank computes
        # alike (mxhorovod.training.update_layout; engine order only, nothing waits).
        if distributed and update_layout.layout_sensitive(self._optimizer):
            params = self._params
            self._settler.settle([i for i, p in enumerate(params) if p.grad_req != "null"],
                                 lambda keys: [params[i].list_data() for i in keys])
        if not (distributed and self._adasum is not None):
            super(DistributedTrainer, self)._update(ignore_stale_grad)
            return
        # Adasum: the local step's change to each weight, combined over the ranks
        # (mxhorovod.training.adasum).
        pairs = [(i, p.list_data()[0]) for i, p in enumerate(self._params)
                 if p.grad_req != "null"]
        self._adasum.before(pairs)
        try:
            super(DistributedTrainer, self)._update(ignore_stale_grad)
        finally:
            # Also when the local step raised (a stale gradient): the peers wait for this
            # rank's deltas, zero where nothing was updated.
            self._adasum.after(pairs, lambda i: self._name(i) + ".adasum", self._process_set,
                               lambda i: self._priorities[i])

    def _check_batch_size(self, batch_size, method="step"):
        # Ranks passing different batch sizes update differently: warned two steps later
        # (mxhorovod.checks.batch_check; one 64-byte allreduce per step, never waited for), and so
        # do different learning rates or weight decays.
        if outside(self._process_set) or set_size(self._process_set, "DistributedTrainer") == 1:
            return
        if self._prefix is None:
            self._auto_prefix()
        self._batch_check.submit(batch_size, self._prefix + "batch_size", self._process_set,
                                 method, self._optimizer)

    def _allreduce_grads(self):
        if self._accumulation is not None:
            self._accumulation.check("allreduce_grads")
        if outside(self._process_set):
            return  # a rank outside the set trains on its own gradients (as one process)
        if self._prefix is None:
            self._auto_prefix()
        if set_size(self._process_set, "DistributedTrainer") > 1:
            # Ranks reducing different parameters wait for each other forever: an error on
            # every rank instead (mxhorovod.checks.layout_check; blocking only when it changed).
            self._layout_check.check(self._params, self._prefix + "layout", self._process_set,
                                     "DistributedTrainer '%s'" % self._prefix,
                                     self._reduction_settings(), contexts=1)
        if self._adasum is not None:
            return  # Adasum reduces the update, in _update
        if getattr(self, "_agree_on_fresh", False) and \
                set_size(self._process_set, "DistributedTrainer") > 1:
            zero_stale_where_fresh_elsewhere(self._params, self._prefix + "fresh",
                                             self._process_set)
        # Buckets are bound even on one rank, so param.grad() is the same kind of array
        # whatever the number of ranks.
        buckets = self._buckets.for_step(self._prefix, self._process_set) \
            if self._buckets is not None else []
        if set_size(self._process_set, "DistributedTrainer") == 1:
            return
        in_buckets = self._buckets.bound_indices if buckets else ()
        dense, sparse = [], []
        for i, param in enumerate(self._params):
            if param.grad_req == "null" or i in in_buckets:
                continue
            grad = param.list_grad()[0]
            (sparse if grad.stype != "default" else dense).append((i, grad))
        # Gradients are never in MKLDNN's layout: the core need not wait for backward.
        self._wire_used = set()
        with gradient_reduction():
            self._allreduce_buckets(buckets)
            if self._num_groups > 0:
                self._allreduce_grouped(dense)
            else:
                kwargs = self._reduce_kwargs()
                for i, grad in dense:
                    self._allreduce_one(i, grad, kwargs)
            for i, grad in sparse:
                self._allreduce_row_sparse(i, grad)
        # Wire buffers of gradients or buckets gone since (buckets rebound under new
        # numbers): dropped (MXNet frees them once the engine's queued uses are done).
        for key in [k for k in self._wire if k not in self._wire_used]:
            del self._wire[key]

    def _allreduce_buckets(self, buckets):
        """One in-place allreduce of each bucket's flat buffer (never of its views: the
        core refuses views of one buffer in one call). Priority: that of the bucket's
        earliest gradient in backward. Names: the buckets' stable numbers."""
        names = ["%sbucket.%d" % (self._prefix, b.number) for b in buckets]
        prio = [max(self._priorities[i] for i in b.indices) for b in buckets]
        if self._num_groups <= 0:
            for b, name, pr in zip(buckets, names, prio):
                sent, ctx = self._compress(b.flat, name)
                allreduce_(sent, name=name, priority=pr, **self._reduce_kwargs())
                if sent is not b.flat:
                    self._decompress_into(sent, ctx, b.flat)
            return
        for group in split_list(list(range(len(buckets))), self._num_groups):
            by_dtype = {}
            for k in group:
                by_dtype.setdefault(buckets[k].dtype.name, []).append(k)
            for dtype in sorted(by_dtype):
                ks = by_dtype[dtype]
                sent = [self._compress(buckets[k].flat, names[k]) for k in ks]
                grouped_allreduce_([t for t, _ in sent],
                                   name="%s:%d" % (names[ks[0]], len(ks)),
                                   priority=max(prio[k] for k in ks), **self._reduce_kwargs())
                for k, (t, ctx) in zip(ks, sent):
                    if t is not buckets[k].flat:
                        self._decompress_into(t, ctx, buckets[k].flat)

    def _compress(self, tensor, key):
        """The compressed array to send of ``tensor`` (``key``: the name of its collective,
        a gradient's or a bucket's), in a wire buffer kept from step to step where the
        compressor can."""
        self._wire_used.add(key)
        return self._wire_compress(tensor, self._wire, key)

    def _allreduce_one(self, i, grad, kwargs):
        name = self._name(i)
        sent, ctx = self._compress(grad, name)
        allreduce_(sent, name=name, priority=self._priorities[i], **kwargs)
        if sent is not grad:  # never copy an array onto itself: that engine op never runs
            self._decompress_into(sent, ctx, grad)

    def _allreduce_grouped(self, entries):
        for group in split_list(entries, self._num_groups):
            by_dtype = {}
            for i, grad in group:
                by_dtype.setdefault(np.dtype(grad.dtype).name, []).append((i, grad))
            for dtype in sorted(by_dtype):
                members = by_dtype[dtype]
                sent = [self._compress(g, self._name(i)) for i, g in members]
                first, last = members[0][0], members[-1][0]
                grouped_allreduce_([t for t, _ in sent],
                                   name="%s:%d" % (self._name(first), last),
                                   priority=max(self._priorities[i] for i, _ in members),
                                   **self._reduce_kwargs())
                for (_, grad), (t, ctx) in zip(members, sent):
                    if t is not grad:
                        self._decompress_into(t, ctx, grad)

    def _allreduce_row_sparse(self, i, grad):
        # The core refuses row_sparse arrays: densified, written back holding the rows
        # any rank touched (mxhorovod.training.optimizer.allreduce_row_sparse_).
        allreduce_row_sparse_(grad, self._name(i), self._priorities[i],
                              **self._reduce_kwargs())
