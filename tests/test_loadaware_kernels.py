"""The loadaware kernels give identical results in every backend (randomized, fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest

from kai.backends import available_backends, get_backend

BACKENDS = available_backends()
REF = get_backend("python")


def _case(seed: int, n: int = 200, r: int = 3):
    rng = np.random.default_rng(seed)
    alloc = rng.integers(0, 100_000, size=(n, r))
    alloc[rng.random((n, r)) < 0.1] = 0
    existing = (alloc * rng.random((n, r)) * 1.2).astype(np.int64)
    incoming = rng.integers(0, 20_000, size=r)
    thresholds = rng.integers(0, 101, size=(n, r))
    thresholds[rng.random((n, r)) < 0.2] = 0
    state = rng.integers(0, 3, size=n)
    state[rng.random(n) < 0.6] = 0
    weights = rng.integers(0, 5, size=r)
    valid = rng.random(n) < 0.9
    return existing, incoming, alloc, thresholds, state, weights, valid


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(8))
def test_filter_matches_reference(backend, seed):
    ex, inc, al, th, st, _, _ = _case(seed)
    mask, code = get_backend(backend).loadaware_filter(ex, inc, al, th, st)
    ref_mask, ref_code = REF.loadaware_filter(ex, inc, al, th, st)
    assert mask.dtype == np.bool_ and code.dtype == np.int64
    np.testing.assert_array_equal(mask, ref_mask)
    np.testing.assert_array_equal(code, ref_code)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dominant", [0, 7])
def test_score_matches_reference(backend, seed, dominant):
    ex, inc, al, _, _, w, valid = _case(seed)
    got = get_backend(backend).loadaware_score(ex, inc, al, w, dominant, valid)
    want = REF.loadaware_score(ex, inc, al, w, dominant, valid)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    assert (want >= 0).all() and (want <= 100).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_filter_rounding_and_strictness(backend):
    be = get_backend(backend)
    # 64.5% rounds (half away from zero) to 65 -> passes 65; 65.5% rounds to 66 -> fails.
    al = np.array([[1000], [1000], [1000], [0]])
    ex = np.array([[645], [655], [650], [999]])
    th = np.full((4, 1), 65)
    mask, code = be.loadaware_filter(ex, np.array([0]), al, th, np.zeros(4, dtype=np.int64))
    assert mask.tolist() == [True, False, True, True]
    assert code.tolist() == [-1, 0, -1, -1]
    st = np.array([1, 2, 0, 0])
    mask, code = be.loadaware_filter(ex, np.array([0]), al, th, st)
    assert mask.tolist() == [True, False, True, True]
    assert code.tolist() == [-1, -2, -1, -1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_score_worked_examples(backend):
    """Koordinator TestScore: 96 cores / 512 GiB node, pod estimate 13600m / 22.4 GiB."""
    be = get_backend(backend)
    gib = 1024**3
    al = np.array([[96_000, 512 * gib]] * 2)
    est = np.array([13_600, round(32 * gib * 0.7)])
    ex = np.array([[0, 0], [32_000, 10 * gib]])
    ok = np.array([True, True])
    assert be.loadaware_score(ex, est, al, np.array([1, 1]), 0, ok).tolist() == [90, 72]
    assert be.loadaware_score(ex[:1], est, al[:1], np.array([0, 0]), 10, ok[:1]).tolist() == [85]
    small = np.array([250, 200 * 1024 * 1024])
    assert be.loadaware_score(ex[:1], small, al[:1], np.array([1, 1]), 0, ok[:1]).tolist() == [99]
    assert be.loadaware_score(ex, est, al, np.array([1, 1]), 0, ~ok).tolist() == [0, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_and_shape_errors(backend):
    be = get_backend(backend)
    e = np.zeros((0, 2), dtype=np.int64)
    mask, code = be.loadaware_filter(e, [0, 0], e, e, np.zeros(0, dtype=np.int64))
    assert mask.shape == (0,) and code.shape == (0,)
    assert be.loadaware_score(e, [0, 0], e, [1, 1], 0, np.zeros(0, dtype=bool)).shape == (0,)
    with pytest.raises(ValueError):
        be.loadaware_filter(np.zeros((2, 2)), [0, 0], np.zeros((3, 2)), np.zeros((2, 2)), [0, 0])


def test_ten_thousand_nodes_one_call():
    be = get_backend()
    n, r = 10_000, 2
    rng = np.random.default_rng(1)
    al = rng.integers(1, 10**6, size=(n, r))
    ex = rng.integers(0, 10**6, size=(n, r))
    scores = be.loadaware_score(ex, np.array([100, 100]), al, np.array([1, 1]), 0, np.ones(n, bool))
    assert scores.shape == (n,)
