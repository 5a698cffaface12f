"""``warn_user(message)``: a ``UserWarning`` attributed to the first frame outside mxhorovod
and MXNet (the script's line that called ``step()``, ``update()``, ...), however deep in the
library it is raised: no caller counts ``stacklevel``.
"""
import os
import sys
import warnings

import mxnet as mx

# mxhorovod/ (two levels above this file: mxhorovod/common/user_warning.py) and MXNet's.
_LIBRARY_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                 os.path.dirname(os.path.abspath(mx.__file__)) + os.sep)


def warn_user(message, category=UserWarning):
    level, frame = 2, sys._getframe(1)  # stacklevel 2: warn_user's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_LIBRARY_DIRS):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
