"""Automatic collective names that every rank derives alike.

The ranks match a collective by its name, so a name the library makes up must come out the
same on every rank that takes part, whatever else each rank did. Automatic names are
numbered per kind and per process set, in call order: a rank's calls on a set the others are
not in, or helpers it made but never used, do not shift the numbers of the calls it shares
with the others (one counter per process, as before, hung a job whose ranks made different
numbers of trainers or called helpers on different sets).
"""
import itertools

_counters = {}


def next_number(kind, process_set_id):
    """0, 1, 2, ... per (``kind``, ``process_set_id``), in this process's call order."""
    key = (kind, int(process_set_id))
    counter = _counters.get(key)
    if counter is None:
        counter = _counters.setdefault(key, itertools.count())
    return next(counter)
