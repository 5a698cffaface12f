"""Rank 1 joins 3 s after rank 0: the stall inspector reports the join. Prints RANK <r> OK."""
import time

import mxhorovod as hvd

hvd.init()
if hvd.rank() == 1:
    time.sleep(3)
assert hvd.join() == 1
print("RANK %d OK" % hvd.rank(), flush=True)
