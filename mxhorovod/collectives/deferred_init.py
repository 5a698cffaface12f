"""Gluon parameters whose initialization is deferred, for ``broadcast_parameters``.

A parameter whose shape is known only at the first forward (``nn.Dense(10)`` without
``in_units``) is broadcast right after its deferred initialization, inside that forward,
by a hook on ``Parameter._init_impl`` (:func:`broadcast_when_initialized`), as in Horovod.
With MXNet's threaded engines the ranks' broadcasts meet by name, also when one rank
broadcasts a parameter at the call and another during its forward.
Under MXNet's NaiveEngine (:func:`synchronous_engine`) each collective completes inside its
call, so the ranks must broadcast in the same order: a parameter deferred on some rank is
made deferred again where it is initialized (:func:`defer_again`, its arrays kept).
"""
import os
import types

import numpy as np
from mxnet import initializer


def synchronous_engine():
    """Whether MXNet runs every operation inside its call (``MXNET_ENGINE_TYPE`` is
    ``NaiveEngine``, as the core checks it)."""
    return os.environ.get("MXNET_ENGINE_TYPE") == "NaiveEngine"


def is_deferred(param):
    """Whether ``param`` (a gluon ``Parameter``) waits for its deferred initialization."""
    return param._data is None and bool(param._deferred_init)


def _set_hook(param, hook):
    """Makes ``hook(param, data, ctx_list, original)`` run in place of ``param._init_impl``
    once, ``original`` being the method it replaces (the class's, or an earlier hook)."""
    original = param._init_impl

    def once(self, data, ctx_list):
        # Remove the hook before anything runs (an earlier hook that ``original`` is finds
        # nothing left to remove): a later load_parameters on one rank alone must not
        # start a collective.
        vars(self).pop("_init_impl", None)
        hook(self, data, ctx_list, original)

    param._init_impl = types.MethodType(once, param)


def broadcast_when_initialized(param, broadcast):
    """Makes ``param`` call ``broadcast(param's arrays, one per context)`` right after its
    next initialization (the deferred one, in the first forward), once."""
    def init_then_broadcast(self, data, ctx_list, original):
        original(data, ctx_list)
        broadcast(self._data)

    _set_hook(param, init_then_broadcast)


def defer_again(param):
    """Makes the initialized ``param`` wait for a deferred initialization, as on a rank
    where its shape is not known yet: until the first forward reading it raises
    ``DeferredInitializationError``. That initialization gives it back its own arrays
    (data and gradient, so references kept to them stay valid), holding the values it had,
    or the values ``set_data`` gave it meanwhile; new arrays only if its contexts, shape or
    dtype changed meanwhile (``reset_ctx``, ``cast``). As for any deferred parameter,
    ``load_parameters`` or ``initialize`` meanwhile initializes it at that call."""
    data, grad, ctx_list = param._data, param._grad, list(param._ctx_list)
    first = data[0]

    def restore(self, new, new_ctx_list, original):
        dtype = np.dtype(self.dtype)
        if (list(new_ctx_list) != ctx_list or new.shape != first.shape
                or dtype != first.dtype or new.stype != first.stype):
            original(new.astype(dtype, copy=False), new_ctx_list)
            return
        self._data, self._grad = data, grad
        if new is not first:
            new = new.astype(dtype, copy=False)
            for arr in data:
                new.copyto(arr)

    # The tuple Parameter.initialize leaves, with the data slot set_data fills: the
    # forward's _finish_deferred_init hands ``first`` to _init_impl, without an initializer.
    param._deferred_init = (param.init, ctx_list, initializer.Uniform(), first)
    param._data = param._grad = None
    _set_hook(param, restore)
