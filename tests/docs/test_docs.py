"""The documentation agrees with the code: the settings table lists exactly the variables
the code reads, every message quoted on the troubleshooting page still exists, the API page
documents exactly ``mxhorovod.__all__``, and the site builds with warnings as errors."""
import glob
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from support.paths import ROOT

DOCS = os.path.join(ROOT, "docs")
CODE_DIRS = ("src", "include", "mxhorovod", "mxhorovodrun")
CODE_EXTS = (".py", ".cc", ".h", ".cpp")


def _code_files():
    yield os.path.join(ROOT, "setup.py")  # the build's settings and messages
    for d in CODE_DIRS:
        for path in glob.glob(os.path.join(ROOT, d, "**", "*"), recursive=True):
            if path.endswith(CODE_EXTS) and os.path.isfile(path):
                yield path


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# A variable name as a string literal's first word: getenv("X"), os.environ.get("X"),
# EnvNumber("X", ...), ("PMI_RANK", "HOROVOD_RANK"), put("X", ...), "X=%s is ..." in a
# message. Header guards and op constants (MXHOROVOD_SUM) are not in quotes.
_VAR_IN_CODE = re.compile(r"""(?<=["'])((?:MX)?HOROVOD_[A-Z0-9]+(?:_[A-Z0-9]+)*)""")
_VAR_IN_TABLE = re.compile(r"^\| `((?:MX)?HOROVOD_[A-Z0-9_]+)` \|", re.M)


def test_settings_table_matches_the_code():
    in_code = {}
    for path in _code_files():
        for name in _VAR_IN_CODE.findall(_read(path)):
            if name != "MXHOROVOD_MXNET_VERSION":  # a C macro that setup.py defines
                in_code.setdefault(name, os.path.relpath(path, ROOT))
    table = _VAR_IN_TABLE.findall(_read(os.path.join(DOCS, "settings.md")))
    assert len(table) == len(set(table)), "listed twice: %s" % sorted(
        n for n in set(table) if table.count(n) > 1)
    assert len(in_code) > 30  # the scan itself works
    missing = sorted("%s (%s)" % (n, p) for n, p in in_code.items() if n not in table)
    stale = sorted(set(table) - set(in_code))
    assert not missing, "read by the code, not in docs/settings.md: %s" % missing
    assert not stale, "in docs/settings.md, read nowhere in the code: %s" % stale


def _haystack():
    """All code, with string literals split over lines or by `+` joined again, so a message
    quoted across such a split is found."""
    text = "\n".join(_read(p) for p in _code_files())
    return re.sub(r"""["']\s*\+?\s*\n\s*\+?\s*["']""", "", text)


def test_troubleshooting_messages_exist():
    page = _read(os.path.join(DOCS, "troubleshooting.md"))
    quotes = re.findall(r"^```text\n(.*?)\n```", page, re.M | re.S)
    assert len(quotes) >= 20
    code = _haystack()
    lost = []
    for quote in quotes:
        fragments = [f.strip() for f in quote.split("...")]
        checked = [f for f in fragments if len(f) >= 4]
        assert sum(map(len, checked)) >= 15, "too little to check: %r" % quote
        lost += [f for f in checked if f not in code]
    assert not lost, "quoted on docs/troubleshooting.md, found in no code: %s" % lost


def test_api_page_documents_all():
    import mxhorovod
    page = _read(os.path.join(DOCS, "api.md"))
    documented = set(re.findall(r"^\.\. auto(?:function|class|data|exception):: mxhorovod\.(\w+)$",
                                page, re.M))
    public = set(mxhorovod.__all__)
    assert not public - documented, "not on docs/api.md: %s" % sorted(public - documented)
    assert not documented - public, "on docs/api.md, not in __all__: %s" % sorted(
        documented - public)
    for name in public:
        assert hasattr(mxhorovod, name), name
    # Every Horovod name is public (tests/support/horovod_api.py lists them).
    from support.horovod_api import HOROVOD_MXNET_NAMES
    assert not set(HOROVOD_MXNET_NAMES) - public, sorted(set(HOROVOD_MXNET_NAMES) - public)


@pytest.mark.parametrize("script", ["gluon_quickstart.py", "kvstore_quickstart.py"])
def test_quickstart_trains_as_one_process(tmp_path, script):
    """The scripts shown on docs/getting_started.md and docs/kvstore.md, on 2 ranks: rank
    0's printed losses and saved parameters equal one process trained on the concatenated
    batches."""
    from mxhorovod_devtools.mpirun import run_ranks
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    script = os.path.join(ROOT, "examples", script)
    saved = str(tmp_path / "net.params")
    out = run_ranks(2, script, ["--epochs", "2", "--save", saved], timeout=180,
                    expect_ok=False)
    assert out.returncode == 0, out.stdout[-6000:]
    printed = [float(x) for x in re.findall(r"^(?:\[0\] )?epoch \d+: loss (\S+)$", out.stdout, re.M)]
    assert len(printed) == 2, out.stdout[-6000:]

    spec = importlib.util.spec_from_file_location(
        "gluon_quickstart", os.path.join(ROOT, "examples", "gluon_quickstart.py"))
    qs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(qs)  # its imports of examples/: on sys.path through pytest's
    #                              pythonpath setting
    mx.random.seed(42)
    data = qs.make_dataset()
    net = qs.build_net()
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.05 * 2, "momentum": 0.9}, kvstore=None)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = data._data
    n, batch = len(y) // 2, 32
    losses = []
    for epoch in range(2):
        order = np.random.RandomState(epoch).permutation(len(y))  # ShardSampler's, seed 0
        shards = [order[:n], order[n:2 * n]]
        total = 0.0
        for k in range(n // batch):
            idx = np.concatenate([s[k * batch:(k + 1) * batch] for s in shards])
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(x[idx])), mx.nd.array(y[idx]))
            loss.backward()
            trainer.step(2 * batch)
            total += loss.sum().asscalar()
        losses.append(total / (n // batch * batch * 2))
    np.testing.assert_allclose(printed, losses, atol=2e-4)
    trained = qs.build_net()
    trained.load_parameters(saved)
    for (name, want), got in zip(net.collect_params().items(),
                                 trained.collect_params().values()):
        np.testing.assert_allclose(got.data().asnumpy(), want.data().asnumpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=name)


def test_collectives_example():
    """examples/collectives.py, shown on docs/collectives.md, checks its own results on
    every rank (against numpy) and prints RANK r OK."""
    from mxhorovod_devtools.mpirun import run_ranks
    run_ranks(2, os.path.join(ROOT, "examples", "collectives.py"), timeout=120)


@pytest.mark.skipif(importlib.util.find_spec("sphinx") is None,
                    reason="sphinx is not installed (pip install .[docs])")
def test_sphinx_build_has_no_warnings(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                        "-d", str(tmp_path / "doctrees"), DOCS, str(tmp_path / "html")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-8000:]
    assert os.path.exists(tmp_path / "html" / "api.html")
