"""Data for examples/mxnet_imagenet_resnet50.py: ImageNet RecordIO sharded by rank, and
synthetic batches for --benchmark. Both give every rank the same number of steps.

A RecordIO file is split into ``num_parts`` byte ranges, so parts may hold a few records
more or less; ``EqualStepsIter`` therefore yields a fixed number of batches per epoch on
every rank (restarting a part that runs out), or one rank would wait forever in an allreduce.
"""
import mxnet as mx

__all__ = ["EqualStepsIter", "SyntheticIter", "record_iters", "MEAN_RGB", "STD_RGB"]

MEAN_RGB = (123.68, 116.779, 103.939)
STD_RGB = (58.393, 57.12, 57.375)


class EqualStepsIter(mx.io.DataIter):
    """Wrap a DataIter to yield exactly ``steps`` batches per epoch (``reset()`` starts the
    next epoch; the wrapped iterator is restarted whenever it runs out)."""

    def __init__(self, base, steps):
        super(EqualStepsIter, self).__init__(base.batch_size)
        self._base, self._steps, self._done = base, steps, 0

    @property
    def provide_data(self):
        return self._base.provide_data

    @property
    def provide_label(self):
        return self._base.provide_label

    def reset(self):
        self._done = 0

    def next(self):
        if self._done == self._steps:
            raise StopIteration
        try:
            batch = self._base.next()
        except StopIteration:
            self._base.reset()
            batch = self._base.next()
        self._done += 1
        return batch


class SyntheticIter(mx.io.DataIter):
    """``steps`` batches of one fixed random batch (data float32 (B, 3, S, S), labels in
    [0, classes)), for measuring throughput without reading data."""

    def __init__(self, batch_size, image_size, classes, steps, dtype="float32"):
        super(SyntheticIter, self).__init__(batch_size)
        shape = (batch_size, 3, image_size, image_size)
        self._data = mx.nd.random.uniform(-1, 1, shape=shape, dtype=dtype)
        self._label = mx.nd.random.randint(0, classes, shape=(batch_size,)).astype("float32")
        self._steps, self._done = steps, 0
        self._provide_data = [mx.io.DataDesc("data", shape, dtype)]
        self._provide_label = [mx.io.DataDesc("softmax_label", (batch_size,), "float32")]

    @property
    def provide_data(self):
        return self._provide_data

    @property
    def provide_label(self):
        return self._provide_label

    def reset(self):
        self._done = 0

    def next(self):
        if self._done == self._steps:
            raise StopIteration
        self._done += 1
        return mx.io.DataBatch([self._data], [self._label], pad=0)


def record_iters(rec_train, rec_val, batch_size, image_size, rank, size, augment=True,
                 shuffle=True, threads=2, seed=0):
    """(train, val) ``mx.io.ImageRecordIter`` on this rank's part (``num_parts=size``,
    ``part_index=rank``); val is None without ``rec_val``. Images are resized (shorter side
    to image_size * 8/7), cropped to ``image_size`` (random crop and mirror with
    ``augment``, else centre), normalized with the ImageNet mean and std."""
    norm = dict(mean_r=MEAN_RGB[0], mean_g=MEAN_RGB[1], mean_b=MEAN_RGB[2],
                std_r=STD_RGB[0], std_g=STD_RGB[1], std_b=STD_RGB[2])
    common = dict(data_shape=(3, image_size, image_size), batch_size=batch_size,
                  resize=int(image_size * 8 / 7), num_parts=size, part_index=rank,
                  preprocess_threads=threads, data_name="data", label_name="softmax_label",
                  **norm)
    train = mx.io.ImageRecordIter(path_imgrec=rec_train, shuffle=shuffle, rand_crop=augment,
                                  rand_mirror=augment, seed=seed, round_batch=True, **common)
    val = None
    if rec_val:
        val = mx.io.ImageRecordIter(path_imgrec=rec_val, shuffle=False, rand_crop=False,
                                    rand_mirror=False, round_batch=False, **common)
    return train, val
