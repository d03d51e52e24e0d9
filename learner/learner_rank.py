"""LearnerRank: one data-parallel rank of the DeepSpeed ZeRO learner (learner/zero_rank.py) as a Ray actor.

The rank's work is Ray-free; what Ray adds is where it runs and the address rank 0 offers the others.
"""

from __future__ import annotations

import ray

from learner.zero_rank import ZeroRank


@ray.remote
class LearnerRank(ZeroRank):
    def rendezvous_address(self) -> tuple[str, int]:
        from conductor.weight_transfer import free_port

        host = ray.util.get_node_ip_address()
        return host, free_port(host)
