"""The training features on 2 and 3 ranks, one test per scenario of
tests/training/workers/training_features.py: grad_req='add', clipping between
allreduce_grads and update, two trainers, the unwrap warning, dict order and
grad_req='null', row_sparse Embedding (DistributedTrainer, DistributedOptimizer in
gluon.Trainer and in Module.fit), fp16 compression, ignore_stale_grad with a branch used on
some ranks, AMP loss scaling with an overflow on one rank, ranks reducing different
parameters or made with different settings (a ValueError on every rank, not a hang),
DistributedOptimizer on several contexts, and update() without allreduce_grads().

One mpirun job per number of ranks runs every scenario (a module-scoped fixture); each rank
writes a result per scenario, and each test asserts that its scenario passed on every rank,
showing its error, or where the job ended before it."""
import ast
import json

import pytest

from mxhorovod_devtools.mpirun import run_ranks, worker_path

WORKER = "training_features.py"


def scenario_names():
    """The names in the worker's SCENARIOS, in its order (read from its source: collecting
    the tests imports no MXNet)."""
    with open(worker_path(WORKER)) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["SCENARIOS"]:
            return [elt.id for elt in node.value.generators[0].iter.elts]
    raise AssertionError("no SCENARIOS in %s" % WORKER)


@pytest.fixture(scope="module", params=[2, 3], ids=lambda np_: "np%d" % np_)
def features_job(request, tmp_path_factory):
    """(ranks, results folder, the job's output) of one job running every scenario."""
    np_ = request.param
    results = tmp_path_factory.mktemp("features-np%d" % np_)
    try:
        proc = run_ranks(np_, WORKER, timeout=300, env={"SCENARIO_RESULTS": str(results)},
                         expect_ok=False)
        output = "exit %d\n%s" % (proc.returncode, proc.stdout)
    except AssertionError as e:  # timed out: the job was killed, e names its processes
        output = str(e)
    return np_, results, output


@pytest.mark.parametrize("scenario", scenario_names())
def test_scenario(features_job, scenario):
    np_, results, output = features_job
    outcome = {}
    for r in range(np_):
        path = results / ("%s.%d.json" % (scenario, r))
        outcome[r] = json.loads(path.read_text()) if path.exists() else None
    errors = ["rank %d:\n%s" % (r, o["error"]) for r, o in outcome.items() if o and not o["ok"]]
    assert not errors, "%s failed on %d ranks\n%s" % (scenario, np_, "\n".join(errors))
    missing = [r for r, o in outcome.items() if o is None]
    assert not missing, "%s did not end on ranks %s: the job ended first (another scenario " \
        "failed, or it hung); the job's output:\n%s" % (scenario, missing, output[-6000:])


def test_the_job_ends_cleanly(features_job):
    # Every scenario passing is not enough: the ranks must also shut down and exit 0.
    np_, _, output = features_job
    assert output.startswith("exit 0\n"), "the %d-rank job:\n%s" % (np_, output[-6000:])
