"""The elastic commit store's folders on a shared host (mxhorovod/elastic/store.py): each
user's own, checked before use; another user's folder or file is never used or read, and
never stops the job. Folders and files of "another user" are made here by chown (root)."""
import logging
import os
import pickle
import stat

import numpy as np
import pytest

from mxhorovod.elastic import store
from mxhorovod.elastic.store import CommitDirError, CommitStore, commit_base_dir

OTHER_UID = 54321  # no such user is needed: root can chown to any uid

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another uid)")


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def warnings_seen():
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    handler = Keep()
    logging.getLogger("mxhorovod").addHandler(handler)
    yield seen
    logging.getLogger("mxhorovod").removeHandler(handler)


def test_default_folder_is_this_users_own(tmp_path):
    base = commit_base_dir({}, shared_root=str(tmp_path))
    assert base == str(tmp_path / ("mxhorovod-elastic-%d" % os.geteuid()))
    assert mode(base) == 0o700 and os.lstat(base).st_uid == os.geteuid()
    s = CommitStore("job1", base=base)
    assert mode(s.directory) == 0o700
    s.write(0, 1, {"w": np.arange(600, dtype=np.float32), "epoch": 2})
    gen, counter, path = s.latest()
    assert (gen, counter) == (0, 1) and mode(path) == 0o600
    got = s.read(path)
    assert got["epoch"] == 2 and np.array_equal(got["w"], np.arange(600, dtype=np.float32))


@needs_root
def test_names_another_user_took_first_are_passed_over(tmp_path, warnings_seen):
    first = tmp_path / ("mxhorovod-elastic-%d" % os.geteuid())
    first.mkdir(mode=0o777)
    os.chown(first, OTHER_UID, OTHER_UID)
    os.symlink(str(first), str(first) + ".1")  # a link counts as taken too
    base = commit_base_dir({}, shared_root=str(tmp_path))
    assert base == str(first) + ".2" and mode(base) == 0o700
    assert any("passed over %s (it belongs to uid %d" % (first, OTHER_UID) in w and
               "is a symbolic link" in w and base in w for w in warnings_seen), warnings_seen


@needs_root
def test_every_shared_name_taken_falls_back_to_home(tmp_path, monkeypatch):
    first = tmp_path / ("mxhorovod-elastic-%d" % os.geteuid())
    for path in [str(first)] + ["%s.%d" % (first, k) for k in range(1, 16)]:
        os.mkdir(path)
        os.chown(path, OTHER_UID, OTHER_UID)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    base = commit_base_dir({}, shared_root=str(tmp_path))
    assert base.startswith(str(tmp_path / "home" / ".cache" / "mxhorovod" / "elastic-"))
    assert mode(base) == 0o700


@needs_root
@pytest.mark.parametrize("case", ["other_user", "symlink", "group_writable", "file"])
def test_a_named_folder_that_fails_the_check_is_refused_naming_it(tmp_path, case):
    named = tmp_path / "commits"
    if case == "symlink":
        (tmp_path / "real").mkdir(mode=0o700)
        os.symlink(str(tmp_path / "real"), str(named))
    elif case == "file":
        named.write_text("")
    else:
        named.mkdir()
        os.chmod(named, 0o775 if case == "group_writable" else 0o700)
        if case == "other_user":
            os.chown(named, OTHER_UID, OTHER_UID)
    with pytest.raises(CommitDirError, match="MXHOROVOD_ELASTIC_COMMIT_DIR=%s: not used" % named):
        commit_base_dir({"MXHOROVOD_ELASTIC_COMMIT_DIR": str(named)})


def test_a_named_folder_is_made_or_taken_when_it_is_the_users(tmp_path):
    made = tmp_path / "a" / "b"
    assert commit_base_dir({"MXHOROVOD_ELASTIC_COMMIT_DIR": str(made)}) == str(made)
    assert mode(made) == 0o700 and mode(tmp_path / "a") == 0o700
    mine = tmp_path / "mine"
    mine.mkdir()
    os.chmod(mine, 0o755)  # readable by others, writable by this user only: accepted
    assert commit_base_dir({"MXHOROVOD_ELASTIC_COMMIT_DIR": str(mine)}) == str(mine)


def test_a_job_folder_open_to_others_is_refused(tmp_path):
    (tmp_path / "job1").mkdir()
    os.chmod(tmp_path / "job1", 0o777)
    with pytest.raises(CommitDirError, match="job1: not used for elastic commits: its mode is 0777"):
        CommitStore("job1", base=str(tmp_path))


class _Planted:
    def __reduce__(self):
        return (os.mkdir, ("/nonexistent-planted-commit-ran",))


@needs_root
def test_a_commit_file_not_the_users_is_never_read(tmp_path):
    s = CommitStore("job1", base=str(tmp_path))
    own = s.write(1, 3, {"epoch": 7})
    planted = os.path.join(s.directory, "commit-9-9")  # sorts newest
    with open(planted, "wb") as f:
        f.write(len(b"x").to_bytes(8, "little"))
        pickle.dump(_Planted(), f)
    os.chown(planted, OTHER_UID, OTHER_UID)
    os.symlink(own, os.path.join(s.directory, "commit-8-8"))
    assert s.latest() == (1, 3, own)
    with pytest.raises(CommitDirError, match="commit-9-9: not read"):
        s.read(planted)
    with pytest.raises(OSError):  # O_NOFOLLOW
        s.read(os.path.join(s.directory, "commit-8-8"))
    assert s.read(own) == {"epoch": 7}


def test_bad_job_ids_are_refused(tmp_path):
    for bad in ("..", "a/b", "x y"):
        with pytest.raises(ValueError, match="MXHOROVOD_ELASTIC_JOB_ID"):
            CommitStore(bad, base=str(tmp_path))
    assert store.CommitStore("ok.1-x_y", base=str(tmp_path)).directory.endswith("ok.1-x_y")
