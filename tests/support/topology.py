"""The topology a job must report, computed from the host name of every rank (independent
of the library): ranks on one host form the local group in rank order; the ranks with one
local rank form the cross group in rank order (Horovod's definitions)."""


def expected_topology(hosts, rank):
    """hosts[r] is rank r's host name. Returns dict(rank, size, local_rank, local_size,
    cross_rank, cross_size) for ``rank``."""
    mine = hosts[rank]
    local = [r for r, h in enumerate(hosts) if h == mine]
    local_rank_of = {}
    for h in set(hosts):
        for i, r in enumerate([r for r, hh in enumerate(hosts) if hh == h]):
            local_rank_of[r] = i
    lr = local_rank_of[rank]
    cross = [r for r in range(len(hosts)) if local_rank_of[r] == lr]
    return {"rank": rank, "size": len(hosts), "local_rank": local.index(rank),
            "local_size": len(local), "cross_rank": cross.index(rank), "cross_size": len(cross)}


def check_topology(hvd, hosts):
    """Asserts every topology call of ``hvd`` on this rank against ``hosts``."""
    want = expected_topology(hosts, hvd.rank())
    got = {k: getattr(hvd, k)() for k in want}
    assert got == want, "rank %d on %s: topology %s, expected %s (hosts by rank: %s)" % (
        hvd.rank(), hosts[hvd.rank()], got, want, hosts)
