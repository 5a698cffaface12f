"""Fixtures of the elastic tests: ``netns``, two network-namespace hosts (root), built once
per test module and torn down after it."""
import pytest

from mxhorovod_devtools.elastic_hosts import unavailable
from mxhorovod_devtools.netns_hosts import NetnsHosts, NetnsUnavailable


@pytest.fixture(scope="module")
def netns():
    why = unavailable()
    if why:
        pytest.skip(why)
    try:
        with NetnsHosts(2) as hosts:
            yield hosts
    except NetnsUnavailable as e:
        pytest.skip("no network namespaces: %s" % e)
