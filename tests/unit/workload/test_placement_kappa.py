"""`placement_kappa` counts the (worker, PS) pairs on one server with `tuple.count`; it must give what counting
them through a `Counter` of the PS servers did, to the bit."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES
from dl2.workload.speed_fit import placement_kappa

servers = st.lists(st.integers(0, 5), min_size=1, max_size=12).map(tuple)


@given(model=st.sampled_from(MODEL_NAMES), workers=servers, ps=servers)
def test_placement_kappa_counts_pairs_as_a_counter_does(
    model: str, workers: tuple[int, ...], ps: tuple[int, ...]
) -> None:
    profile = CATALOGUE[model]
    ps_count = Counter(ps)
    same_fraction = sum(ps_count.get(node, 0) for node in workers) / (len(workers) * len(ps))
    intra_factor = min(1.0, profile.inter_bw_mb_s / profile.intra_bw_mb_s)
    assert placement_kappa(profile, workers, ps) == (1.0 - same_fraction) + same_fraction * intra_factor
