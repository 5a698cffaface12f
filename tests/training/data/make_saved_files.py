"""Made tests/training/data with mxhorovod 0.1.0 (the flat layout) on PYTHONPATH, on 2 ranks:
    mpirun -np 2 python make_saved_files.py DIR
Writes, with the code on PYTHONPATH, the files whose module paths the new layout must keep:
a gluon.Trainer states file with a DistributedOptimizer (over the global set),
and a pickled ProcessSet and global_process_set."""
import pickle, sys
import mxnet as mx
import mxhorovod as hvd
print(hvd.__file__, file=sys.stderr)
hvd.init(process_sets=[hvd.ProcessSet([0, 1])])
net = mx.gluon.nn.Dense(2, in_units=3)
net.initialize(mx.init.Constant(0.5))
params = net.collect_params()
opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9), process_set=hvd.global_process_set)
trainer = mx.gluon.Trainer(params, opt, kvstore=None)
with mx.autograd.record():
    loss = net(mx.nd.ones((4, 3))).sum()
loss.backward()
trainer.step(4)
if hvd.rank() == 0:
    trainer.save_states(sys.argv[1] + "/trainer_distributed_optimizer.states")
    with open(sys.argv[1] + "/process_sets.pkl", "wb") as f:
        pickle.dump({"global": hvd.global_process_set, "set": hvd.ProcessSet([0, 1])}, f)
