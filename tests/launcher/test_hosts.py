"""mxhorovodrun/hosts.py: -H and --hostfile, bad host lists, and ranks assigned to slots."""
import pytest

from mxhorovodrun import hosts as hostlib


@pytest.mark.parametrize("text,message", [
    ("a:2,,b:1", "empty entry"),
    ("a:x", "must be an integer"),
    ("a:0", "at least 1"),
    ("a b:1", "not a host name"),
    ("a:1,a:2", "listed twice"),
])
def test_bad_hosts(text, message):
    with pytest.raises(ValueError, match=message):
        hostlib.parse_hosts(text)


def test_bad_hostfile_and_too_few_slots(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("node1 slots=2\nnode2 cpus=4\n")
    with pytest.raises(ValueError, match=r"line 2 \('node2 cpus=4'\)"):
        hostlib.parse_hostfile(str(f))
    with pytest.raises(ValueError, match="No such file"):
        hostlib.parse_hostfile(str(tmp_path / "missing"))
    f.write_text("# nothing\n")
    with pytest.raises(ValueError, match="names no host"):
        hostlib.parse_hostfile(str(f))
    with pytest.raises(ValueError, match="-np 5 is more than the 4 slots of a:2,b:2"):
        hostlib.assign_ranks([("a", 2), ("b", 2)], 5)
    assert hostlib.assign_ranks([("a", 2), ("b", 2)], 3) == [("a", 2), ("b", 1)]
