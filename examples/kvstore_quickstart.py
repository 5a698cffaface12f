"""examples/gluon_quickstart.py with an unchanged gluon.Trainer over kvstore 'horovod'.

    mxhorovodrun -np 2 python examples/kvstore_quickstart.py

Importing mxhorovod registers the kvstore. Like MXNet's dist_sync, it sums the gradients
over the ranks, so ``step()`` takes the global batch size. With N ranks it trains as one
process would on batches N times larger (tests/docs/test_docs.py checks that).
"""
import argparse
import os
import sys

import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distributed_data import ShardSampler  # noqa: E402
from gluon_quickstart import build_net, make_dataset  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=3, help="passes over the data")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by ranks")
    p.add_argument("--save", help="rank 0 saves the parameters to this file at the end")
    args = p.parse_args(argv)

    hvd.init()
    mx.random.seed(42)                               # the same initial values everywhere
    dataset = make_dataset()
    net = build_net()
    net.initialize(mx.init.Xavier())
    # [trainer]
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": args.lr * hvd.size(), "momentum": 0.9},
                            kvstore="horovod")
    # [end]
    sampler = ShardSampler(len(dataset), hvd.size(), hvd.rank())
    loader = gluon.data.DataLoader(dataset, batch_size=args.batch_size,
                                   sampler=sampler, last_batch="discard")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total, seen = mx.nd.zeros((1,)), 0
        for data, label in loader:
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            # [step]
            trainer.step(args.batch_size * hvd.size())   # the global batch size
            # [end]
            total += loss.sum()
            seen += args.batch_size
        total = hvd.allreduce(total, op=hvd.Sum, name="loss")
        mean = total.asscalar() / (seen * hvd.size())
        if hvd.rank() == 0:
            print("epoch %d: loss %.4f" % (epoch + 1, mean), flush=True)
    if hvd.rank() == 0 and args.save:
        net.save_parameters(args.save)


if __name__ == "__main__":
    main()
