"""The elastic commit store's folders on a shared host (mxhorovod/elastic/store.py): each
user's own, checked before use; another user's folder or file is never used or read, and
never stops the job. Folders and files of "another user" are made here by chown (root)."""
import logging
import os
import pickle
import stat
import tempfile
import time

import numpy as np
import pytest

from mxhorovod.elastic import commit_dir, store
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


def _take_every_shared_name(root, *extra):
    """Another user makes each default name in ``root`` first (and the names ``extra``)."""
    first = os.path.join(str(root), "mxhorovod-elastic-%d" % os.geteuid())
    names = [first] + ["%s.%d" % (first, k) for k in range(1, 16)] + list(extra)
    for path in names:
        os.mkdir(os.path.join(str(root), path))
        os.chown(os.path.join(str(root), path), OTHER_UID, OTHER_UID)
    return names


@needs_root
def test_every_shared_name_taken_falls_back_to_home(tmp_path, monkeypatch, warnings_seen):
    names = _take_every_shared_name(tmp_path)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    base = commit_base_dir({}, shared_root=str(tmp_path))
    assert base.startswith(str(tmp_path / "home" / ".cache" / "mxhorovod" / "elastic-"))
    assert mode(base) == 0o700
    assert any(names[-1] in w and base in w for w in warnings_seen), warnings_seen


@needs_root
def test_every_shared_name_taken_uses_the_jobs_own_name(tmp_path, monkeypatch, warnings_seen):
    names = _take_every_shared_name(tmp_path)
    monkeypatch.setattr(commit_dir, "_shared_root", lambda: str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "no-home"))
    s = CommitStore("mxh-0123456789ab")
    assert s.base == names[0] + "-mxh-0123456789ab" and mode(s.base) == 0o700
    assert any("passed over %s (it belongs to uid %d" % (names[0], OTHER_UID) in w and
               names[-1] in w and s.base in w for w in warnings_seen), warnings_seen
    s.write(0, 1, {"epoch": 1})
    s.remove()
    assert not os.path.lexists(s.base)


@needs_root
@pytest.mark.parametrize("home", ["missing", "cache_is_a_file"])
def test_no_place_at_all_is_one_error_naming_each(tmp_path, monkeypatch, home):
    names = _take_every_shared_name(tmp_path, "mxhorovod-elastic-%d-mxh-0123456789ab" % os.geteuid())
    if home == "cache_is_a_file":
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / ".cache").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(CommitDirError) as e:
        commit_base_dir({}, shared_root=str(tmp_path), job_id="mxh-0123456789ab")
    text = str(e.value)
    assert all("%s (it belongs to uid %d" % (n, OTHER_UID) in text for n in names), text
    assert ("home folder does not exist" if home == "missing" else "Not a directory") in text
    assert "Set MXHOROVOD_ELASTIC_COMMIT_DIR to a folder of your own" in text


def _old(path, seconds):
    t = time.time() - seconds
    for top, dirs, files in os.walk(str(path)):
        for name in files + dirs:
            os.utime(os.path.join(top, name), (t, t), follow_symlinks=False)
    os.utime(str(path), (t, t))


@needs_root
def test_other_jobs_stale_folders_are_swept(tmp_path, monkeypatch):
    monkeypatch.setattr(commit_dir, "_ttl", [])
    monkeypatch.setenv("MXHOROVOD_ELASTIC_COMMIT_TTL", "3600")
    base, shared = tmp_path / "named", tmp_path / "shm"
    jobs = {}
    for name in ["mxh-00000000000a", "mxh-00000000000b", "mxh-00000000000c", "mxh-00000000000d",
                 "keep-me"]:
        jobs[name] = CommitStore(name, base=str(base))
        jobs[name].write(0, 1, {"epoch": 1})
    (base / "mxh-00000000000c" / "notes.txt").write_text("not a commit")
    os.chown(str(base / "mxh-00000000000d"), OTHER_UID, OTHER_UID)
    os.symlink(str(tmp_path / "elsewhere"), str(base / "mxh-00000000000e"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "commit-0-1").write_text("")
    for name in jobs:
        if name != "mxh-00000000000b":  # b: committed 10 minutes ago
            _old(base / name, 7200)
    _old(tmp_path / "elsewhere", 7200)
    old_base = "mxhorovod-elastic-%d-mxh-00000000000f" % os.geteuid()  # a per-job folder
    os.makedirs(str(shared / old_base / "mxh-00000000000f"))
    _old(shared / old_base, 7200)
    monkeypatch.setattr(commit_dir, "_shared_root", lambda: str(shared))
    monkeypatch.setenv("MXHOROVOD_ELASTIC_COMMIT_DIR", str(base))
    CommitStore("mxh-0000000000aa")
    assert sorted(os.listdir(str(base))) == ["keep-me", "mxh-00000000000b", "mxh-00000000000c",
                                             "mxh-00000000000d", "mxh-00000000000e",
                                             "mxh-0000000000aa"]
    assert os.listdir(str(tmp_path / "elsewhere")) == ["commit-0-1"]
    assert os.path.isdir(str(shared / old_base))  # a named folder: the shared place is not used
    monkeypatch.delenv("MXHOROVOD_ELASTIC_COMMIT_DIR")
    CommitStore("mxh-0000000000aa")
    assert not os.path.lexists(str(shared / old_base))


@needs_root
@pytest.mark.parametrize("case", ["other_user", "symlink", "group_writable", "file"])
def test_a_named_folder_that_fails_the_check_is_refused_naming_it(tmp_path, case):
    named = tmp_path / "commits"
    if case == "symlink":  # another user's link
        (tmp_path / "real").mkdir(mode=0o700)
        os.symlink(str(tmp_path / "real"), str(named))
        os.lchown(str(named), OTHER_UID, OTHER_UID)
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


    link = tmp_path / "link"  # the user's own link to their folder: accepted
    os.symlink(str(mine), str(link))
    assert commit_base_dir({"MXHOROVOD_ELASTIC_COMMIT_DIR": str(link)}) == str(link)


@needs_root
@pytest.mark.parametrize("case", ["other_users_folder", "open_folder", "other_users_link"])
def test_a_named_folder_another_user_could_swap_is_refused(tmp_path, case):
    above = tmp_path / "above"
    if case == "other_users_link":
        (tmp_path / "real").mkdir()
        os.symlink(str(tmp_path / "real"), str(above))
        os.lchown(str(above), OTHER_UID, OTHER_UID)
    else:
        above.mkdir()
        os.chmod(str(above), 0o777 if case == "open_folder" else 0o755)
        if case == "other_users_folder":
            os.chown(str(above), OTHER_UID, OTHER_UID)
    named = above / "x" / "commits"
    with pytest.raises(CommitDirError, match="not used .*%s" % above):
        commit_base_dir({"MXHOROVOD_ELASTIC_COMMIT_DIR": str(named)})
    assert not os.path.lexists(str(tmp_path / "real" / "x"))  # nothing made in it


def test_common_places_pass_the_check_of_the_folders_above(tmp_path):
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(str(sticky), 0o1777)  # as /tmp
    named = sticky / "commits"
    assert commit_base_dir({"MXHOROVOD_ELASTIC_COMMIT_DIR": str(named)}) == str(named)
    for place in ["/dev/shm", tempfile.gettempdir(), os.path.expanduser("~"),
                  tempfile.gettempdir() + "/x"]:
        if os.path.isdir(os.path.dirname(place)):
            assert commit_dir._walk(place, False)[0] is None, place


def test_the_folders_are_checked_again_at_each_commit(tmp_path):
    above = tmp_path / "above"
    s = CommitStore("job1", base=str(above / "commits"))
    s.write(0, 1, {"epoch": 1})
    os.chmod(str(above), 0o777)  # now another user could swap "commits"
    with pytest.raises(CommitDirError, match="can write to the folder %s above" % above):
        s.write(0, 2, {"epoch": 2})


def test_commit_files_are_0600_whatever_the_umask(tmp_path):
    old = os.umask(0o777)
    try:
        path = CommitStore("job1", base=str(tmp_path / "c")).write(0, 1, {"epoch": 1})
    finally:
        os.umask(old)
    assert mode(path) == 0o600


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
