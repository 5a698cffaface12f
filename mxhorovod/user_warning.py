"""``warn_user(message)``: a ``UserWarning`` attributed to the first frame outside mxhorovod
and MXNet (the script's line that called ``step()``, ``update()``, ...), however deep in the
library it is raised. Fixed ``stacklevel`` numbers broke whenever a call path gained a
level (a wrapper around a wrapper), and pointed the warning at library code.
"""
import os
import sys
import warnings

import mxnet as mx

_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                      for m in (sys.modules[__name__.rpartition(".")[0]], mx))


def warn_user(message, category=UserWarning):
    level, frame = 2, sys._getframe(1)  # stacklevel 2: warn_user's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_LIBRARY_DIRS):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
