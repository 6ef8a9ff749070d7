"""The rows of repeated (user, item) pairs are found alike by the hash lookup (few repeated
keys) and by the argsort (many): both are every row whose key occurs twice, in row order."""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.data as data


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 40), max_size=60), st.sampled_from([0, 1 << 16]))
def test_rows_of_repeated_keys(keys, few):
    key = np.array(keys, dtype=np.int64)
    counts = {k: keys.count(k) for k in keys}
    expected = [i for i, k in enumerate(keys) if counts[k] > 1]  # the naive reading
    repeated = np.array(sorted(k for k, c in counts.items() if c > 1), dtype=np.int64)
    with mock.patch.object(data, "_FEW_KEYS", few):
        assert data._rows_of(key, repeated).tolist() == expected
