"""Closing the launcher's connection in a process that ends by ``os._exit()``.

MPICH (4.1 and later) tells Hydra's simple PMI that a process is done (``cmd=finalize`` on
the socket ``PMI_FD``, then it waits for ``cmd=finalize_ack``) from a C exit handler.
``os._exit()`` skips it, as every ``multiprocessing`` child's end does: the launcher then
takes the rank for crashed and kills every other rank by SIGKILL, silently.
:func:`finalize` says it on such a process's behalf, after ``MPI_Finalize``.
Only for Hydra's simple PMI version 1 (``PMI_FD`` set, ``MPIR_CVAR_PMI_VERSION`` /
``MPICH_PMI_VERSION`` unset or 1); other launchers keep their own behaviour.
It must be the process's last word to the launcher: MPICH's own exit handler, run after
it, would wait forever for a second acknowledgement.
"""
import os
import select
import time

_LIMIT_S = 10.0


def _simple_pmi_fd():
    """The descriptor of Hydra's simple PMI v1 connection, or None."""
    value = os.environ.get("PMI_FD", "")
    if not value.isdigit():
        return None
    for name in ("MPIR_CVAR_PMI_VERSION", "MPICH_PMI_VERSION", "MPIR_PARAM_PMI_VERSION"):
        if os.environ.get(name, "1").strip() not in ("", "1"):
            return None
    return int(value)


def finalize(limit_s=_LIMIT_S):
    """Tells the launcher that this process has finalized MPI (``cmd=finalize``) and waits
    up to ``limit_s`` seconds for its acknowledgement. Call only after ``MPI_Finalize``, in
    a process about to end by ``os._exit()``. Returns a text saying what failed, or None
    when the launcher acknowledged (or there is no simple PMI connection: nothing to do)."""
    fd = _simple_pmi_fd()
    if fd is None:
        return None
    try:
        os.write(fd, b"cmd=finalize\n")
        reply = b""
        deadline = time.monotonic() + limit_s
        while not reply.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return "no answer in %g s" % limit_s
            chunk = os.read(fd, 256)
            if not chunk:
                return "the launcher closed the connection"
            reply += chunk
    except OSError as e:
        return "PMI_FD=%d: %s" % (fd, e.strerror or e)
    if not reply.startswith(b"cmd=finalize_ack"):
        return "unexpected answer %r" % reply[:80]
    return None
