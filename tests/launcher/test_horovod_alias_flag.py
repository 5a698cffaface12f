"""mxhorovodrun --horovod-alias (MXHOROVOD_HOROVOD_ALIAS=1): the alias folder first on the
ranks' PYTHONPATH, once, other entries kept; nothing without it. The ranks' side:
tests/parity/test_horovod_alias.py."""
import os

import pytest

from mxhorovod_devtools.mpirun import REPO
from mxhorovodrun.args import build_parser
from mxhorovodrun.horovod_alias import alias_path, alias_pythonpath
from mxhorovodrun.launch import main
from mxhorovodrun.mpi import HYDRA, OPEN_MPI
from support.launcher import VERSIONS, fake_mpirun, plan, starts

ALIAS = os.path.join(REPO, "mxhorovod", "horovod_alias")


def test_the_folder_is_the_packages():
    assert alias_path() == ALIAS
    assert os.path.isfile(os.path.join(ALIAS, "horovod", "mxnet", "__init__.py"))


@pytest.mark.parametrize("argv,environ,want", [
    (["--horovod-alias"], {}, ALIAS),
    (["--horovod-alias"], {"PYTHONPATH": "/a:/b"}, ALIAS + ":/a:/b"),
    (["--horovod-alias"], {"PYTHONPATH": "/a:%s:/b" % ALIAS}, ALIAS + ":/a:/b"),
    (["--horovod-alias", "-x", "PYTHONPATH=/c"], {"PYTHONPATH": "/a"}, ALIAS + ":/c"),
    ([], {"MXHOROVOD_HOROVOD_ALIAS": "1", "PYTHONPATH": "/a"}, ALIAS + ":/a"),
    ([], {"MXHOROVOD_HOROVOD_ALIAS": "yes"}, ALIAS),
    ([], {"PYTHONPATH": "/a"}, "/a"),
    ([], {}, None),
    ([], {"MXHOROVOD_HOROVOD_ALIAS": "0", "PYTHONPATH": "/a"}, "/a"),
    (["--no-horovod-alias"], {"MXHOROVOD_HOROVOD_ALIAS": "1", "PYTHONPATH": "/a"}, "/a"),
])
def test_pythonpath_of_the_ranks(tmp_path, argv, environ, want):
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2"] + argv + ["python", "t.py"],
                         environ=environ)
    assert env.get("PYTHONPATH") == want and notes == []


def test_open_mpi_forwards_it(tmp_path):
    cmd, env, _ = plan(tmp_path, OPEN_MPI, ["-np", "2", "--horovod-alias", "python", "t.py"])
    assert env["PYTHONPATH"] == ALIAS
    assert cmd[cmd.index("PYTHONPATH") - 1] == "-x"


def test_alias_pythonpath_keeps_the_order():
    assert alias_pythonpath(None, "/al") == "/al"
    assert alias_pythonpath("", "/al") == "/al"
    # An empty entry is the current folder for Python: kept.
    assert alias_pythonpath("/x::/al:/y", "/al") == "/al:/x::/y"
    assert alias_pythonpath(":", "/al") == "/al::"


def test_help_names_the_flag_and_the_variable():
    help_text = build_parser().format_help()
    assert "--horovod-alias" in help_text and "MXHOROVOD_HOROVOD_ALIAS" in help_text
    assert "--no-horovod-alias" not in help_text


def test_missing_folder_is_named_and_nothing_starts(tmp_path, monkeypatch, capsys):
    import mxhorovodrun.horovod_alias as alias
    monkeypatch.setattr(alias, "package_places", lambda: [str(tmp_path / "nowhere")])
    monkeypatch.setenv("MXHOROVOD_MPIRUN", fake_mpirun(tmp_path, VERSIONS[HYDRA]))
    started = []
    assert main(["-np", "2", "--horovod-alias", "python", "t.py"], **starts(started)) == 1
    assert started == []
    err = capsys.readouterr().err
    assert "mxhorovodrun: error: --horovod-alias: the alias package" in err, err
    assert "nowhere" in err, err
