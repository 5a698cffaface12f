"""python -m mxhorovod.runner -np 2 python train.py: ``python -m mxhorovodrun``, under its
old name (which imports mxhorovod, and so MXNet, before the launcher starts)."""
import sys

from mxhorovodrun.launch import run_commandline

sys.exit(run_commandline())
