"""python -m mxhorovod.runner -np 2 python train.py  (the same as mxhorovodrun)."""
import sys

from mxhorovod.runner.launch import run_commandline

sys.exit(run_commandline())
