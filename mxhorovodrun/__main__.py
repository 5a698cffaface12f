"""python -m mxhorovodrun -np 2 python train.py  (the same as mxhorovodrun)."""
import sys

from mxhorovodrun.launch import run_commandline

sys.exit(run_commandline())
