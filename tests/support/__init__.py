"""Helpers of the tests only (on sys.path through pytest's ``pythonpath = ["tests"]``, and
for worker scripts through the PYTHONPATH that mxhorovod_devtools.mpirun gives every rank):

- :mod:`.fixtures`: the pytest fixtures every folder shares, and the session's cleanup;
- :mod:`.ci_skips`: in CI (MXHOROVOD_CI=1) a skip outside a short allowlist fails the run;
- :mod:`.paths`: folders of the checkout;
- :mod:`.expect`, :mod:`.topology`: checks that worker scripts of several folders share.

What the benchmarks share with the tests (running ranks, namespace hosts) is the
development package ``mxhorovod_devtools`` (devtools/).
"""
