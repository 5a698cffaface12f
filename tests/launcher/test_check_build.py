"""mxhorovodrun/check_build.py: `mxhorovodrun --check-build`, horovodrun's report plus the
MXNet, MPI and mxhorovod this build binds to."""
import os


from mxhorovod_devtools.mpirun import REPO
from support.launcher import launcher


def test_cli_missing_mpirun_and_check_build(tmp_path):
    proc = launcher(["-np", "2", "python", "t.py"], env={"MXHOROVOD_MPIRUN": str(tmp_path / "none")})
    assert proc.returncode == 1
    assert "mxhorovodrun: error: MXHOROVOD_MPIRUN=%s is not an executable file" % (tmp_path / "none") \
        in proc.stdout
    proc = launcher(["--check-build"])
    assert proc.returncode == 0, proc.stdout
    import mxnet
    for line in ("Available Frameworks:", "[X] MXNet", "Available Controllers:", "[X] MPI",
                 "[ ] Gloo", "Available Tensor Operations:", "[ ] NCCL", "[ ] DDL", "[ ] CCL",
                 "MXNet: built against %s, running %s" % (mxnet.__version__, mxnet.__version__),
                 "MPI launcher: MPICH (hydra) ", "Features:", "[X] CPU tensors", "[X] Adasum",
                 "mxhorovod loaded: %s\n" % os.path.join(REPO, "mxhorovod")):
        assert line in proc.stdout, (line, proc.stdout)
