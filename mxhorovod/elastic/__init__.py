"""Elastic training (Horovod's elastic API): the job survives lost hosts and grows onto new
ones when started by ``mxhorovodrun --host-discovery-script ...``::

    import mxhorovod as hvd
    hvd.init()
    ...
    state = hvd.elastic.GluonState(net, trainer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(state)

See docs/elastic.md.
"""
from mxhorovod.elastic.run import run
from mxhorovod.elastic.sampler import ElasticSampler
from mxhorovod.elastic.state import (GluonState, HorovodInternalError, HostsUpdatedInterrupt,
                                     ObjectState, State)

__all__ = ["run", "State", "ObjectState", "GluonState", "ElasticSampler",
           "HorovodInternalError", "HostsUpdatedInterrupt"]
