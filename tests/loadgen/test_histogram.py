"""The load generator's latency histogram: bucket bounds, percentiles against sorted samples,
merging, and the form it crosses process boundaries in."""

from __future__ import annotations

import random

import pytest

from fmq.loadgen.histogram import Histogram, bucket_bounds, bucket_of


def test_every_value_lies_in_its_bucket_and_buckets_are_narrow():
    values = list(range(0, 5000)) + [random.Random(7).randrange(1, 1 << 45) for _ in range(5000)]
    for v in values:
        lo, hi = bucket_bounds(bucket_of(v))
        assert lo <= v <= hi
        assert hi - lo <= max(v, 1) / 128


def test_bucket_index_grows_with_the_value():
    indexes = [bucket_of(v) for v in range(0, 100_000, 7)]
    assert indexes == sorted(indexes)


def test_percentiles_match_the_sorted_samples_within_a_bucket():
    rng = random.Random(1)
    samples = [int(rng.lognormvariate(14, 1)) for _ in range(20_000)]  # ~1 ms, long tail
    h = Histogram()
    for s in samples:
        h.record(s)
    ordered = sorted(samples)
    for q in (0.5, 0.9, 0.99, 0.999):
        exact = ordered[-(-int(q * len(ordered) * 1_000_000) // 1_000_000) - 1]
        assert abs(h.percentile(q) - exact) <= exact / 128
    assert h.percentile(1.0) == max(samples)
    assert h.total == len(samples)


def test_merged_histograms_equal_one_histogram_of_all_samples():
    rng = random.Random(2)
    parts = [[rng.randrange(1, 10**8) for _ in range(1000)] for _ in range(4)]
    whole, merged = Histogram(), Histogram()
    for part in parts:
        h = Histogram()
        for s in part:
            h.record(s)
            whole.record(s)
        merged.merge(Histogram.from_dict(h.to_dict()))
    assert merged.counts == whole.counts
    assert (merged.total, merged.max_ns) == (whole.total, whole.max_ns)
    assert merged.percentile(0.99) == whole.percentile(0.99)


def test_a_weighted_record_counts_as_that_many_values():
    h = Histogram()
    h.record(1000, 16)
    h.record(9000)
    assert h.total == 17
    assert h.percentile(0.9) == pytest.approx(1000, rel=0.01)
    assert h.percentile(0.99) == pytest.approx(9000, rel=0.01)


def test_an_empty_histogram_reports_zero():
    assert Histogram().percentile(0.99) == 0.0
