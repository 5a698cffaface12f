"""Training with averaged gradients: DistributedTrainer (trainer, with gradient buckets in
buckets), DistributedOptimizer (optimizer), gradient compression (compression), kvstore
'horovod' (kvstore), SyncBatchNorm (sync_batch_norm), and every patch of an MXNet class,
installed once (patches).

Internal: users reach these through ``mxhorovod`` (``hvd.DistributedTrainer``, ...).
"""
