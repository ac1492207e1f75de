"""The elastic sampler covers every sample of an epoch exactly once, whatever the
batches, world sizes and restarts (seeded random loops)."""

import random

import torch

from pacer_torch.sampler import ElasticSampler, split_remainder


def random_batches(rng, world, total):
    cuts = sorted(rng.randint(0, total) for _ in range(world - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def test_every_epoch_is_covered_once_through_changing_batches_worlds_and_restarts():
    rng = random.Random(1234)
    for case in range(200):
        n = rng.randint(1, 700)
        seed = rng.randint(0, 2**31)
        s = ElasticSampler(n, seed)
        world = rng.randint(1, 8)
        for epoch in range(3):
            seen = []
            while s.remaining() > 0:
                if rng.random() < 0.15:  # restart, possibly with another world size
                    state = s.state_dict()
                    s = ElasticSampler(n, 999)
                    s.load_state_dict(state)
                    world = rng.randint(1, 8)
                total = rng.randint(world, max(world, 2 * n // 3 + 1))
                batches = random_batches(rng, world, total)
                sizes = s.step_batches(batches)
                before = s.offset
                shares = s.take(batches)
                assert [len(x) for x in shares] == sizes
                assert sum(sizes) == min(total, n - before)
                # Disjoint shares in rank order make up the next positions of the order.
                cat = torch.cat(shares) if shares else torch.empty(0, dtype=torch.int64)
                assert torch.equal(cat, s.permutation(epoch)[before : before + sum(sizes)])
                seen.extend(cat.tolist())
            assert sorted(seen) == list(range(n)), (case, epoch)
            assert s.epoch == epoch
            s.next_epoch()


def test_same_seed_same_order_other_seed_other_order():
    a, b, c = ElasticSampler(1000, 7), ElasticSampler(1000, 7), ElasticSampler(1000, 8)
    assert torch.equal(a.take([100, 50]) [0], b.take([100, 50])[0])
    assert not torch.equal(a.permutation(0), c.permutation(0))
    assert not torch.equal(a.permutation(0), a.permutation(1))


def test_the_tail_of_an_epoch_is_split_in_proportion():
    assert split_remainder([200, 150, 100, 62], 512) == [200, 150, 100, 62]
    tail = split_remainder([200, 150, 100, 62], 96)
    assert sum(tail) == 96 and tail[0] > tail[3] >= 1
    assert split_remainder([5, 5, 5, 5], 2) in ([1, 1, 0, 0],)
    assert split_remainder([3, 1], 0) == [0, 0]


def test_the_tail_of_an_epoch_respects_every_rank_s_minimum():
    # A BatchNorm model needs two samples per rank (min_local_batch): the tail never gives
    # a rank one, it gives it none when too few are left for everyone.
    rng = random.Random(77)
    for _ in range(2000):
        world = rng.randint(1, 6)
        mins = [rng.randint(1, 4) for _ in range(world)]
        batches = [m + rng.randint(0, 60) for m in mins]
        total = rng.randint(0, sum(batches))
        out = split_remainder(batches, total, mins)
        assert total - max(mins) < sum(out) <= total, (batches, total, mins, out)
        assert all(o == 0 or o >= m for o, m in zip(out, mins)), (batches, total, mins, out)
        if total >= sum(mins):
            assert sum(out) == total
            assert all(o >= m for o, m in zip(out, mins))
            assert all(o <= b for o, b in zip(out, batches))
    assert split_remainder([40, 30, 2, 2], 5, [2, 2, 2, 2]) == [3, 2, 0, 0]
    assert split_remainder([40, 30, 2, 2], 9, [2, 2, 2, 2]) == [3, 2, 2, 2]
    # The served ranks at their caps, or a tail smaller than any minimum: samples left
    # out of that epoch rather than a share below a minimum.
    assert split_remainder([2, 2, 2], 5, [2, 2, 2], caps=[2, 2, 2]) == [2, 2, 0]
    assert split_remainder([21, 9], 1, [2, 2]) == [0, 0]
    s = ElasticSampler(73, 1)
    s.minima, s.caps = [2, 2, 2, 2], [None] * 4
    assert s.step_batches([30, 30, 8, 2]) == [30, 30, 8, 2]
    s.take([30, 30, 8, 2])
    assert s.step_batches([30, 30, 8, 2]) == [3, 0, 0, 0]
    s = ElasticSampler(71, 1)
    s.minima = [2, 2, 2, 2]
    s.take([30, 30, 8, 2])
    assert [len(x) for x in s.take([30, 30, 8, 2])] == [0, 0, 0, 0]
    assert s.remaining() == 0, "the one sample no rank can take is passed over"
