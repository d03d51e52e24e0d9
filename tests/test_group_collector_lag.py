"""A replayable run over a store whose listing lags its writes (cluster/group_collector.py): a group its
request stored is waited for, not skipped. The lagging store is a stand-in for a fault neither local disk nor
SeaweedFS shows."""

import collections
import random

import pytest

from conductor.replay_store import ReplayStore
from tests.test_group_collector import newest, oldest, run


class LaggingStore(ReplayStore):
    """Lists a file only from its ``lag``-th listing on, as an object store whose LIST lags its PUT would: a
    stand-in for a fault neither local disk nor SeaweedFS shows (both list a file once it is written)."""

    def __init__(self, root: str, lag: int):
        super().__init__(root)
        self.lag, self.listings = lag, collections.Counter()

    def files(self):
        shown = []
        for entry in super().files():
            self.listings[entry] += 1
            if self.listings[entry] > self.lag:
                shown.append(entry)
        return shown



@pytest.mark.parametrize("k", [0, 2])
def test_in_request_order_a_group_the_store_lists_late_is_waited_for_not_skipped(tmp_path, k):
    """A request came back having stored its groups, but the store's listing does not show them yet: the step
    waits for them, and trains on what it trains on when the listing keeps up, whatever finished first."""
    rng = random.Random(k)
    in_order, _ = run(tmp_path, oldest, in_request_order=True, k=k)
    for pick in (oldest, newest, lambda n: rng.randrange(n)):
        lagging = run(tmp_path, pick, in_request_order=True, k=k, make_store=lambda root: LaggingStore(root, lag=3))
        assert lagging[0] == in_order
