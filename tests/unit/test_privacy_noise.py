"""The parties' noise keys: secret, kept, and the only source of a defence's noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vflcore.errors import ConfigError
from vflprivacy.noise import KEY_FILE, noise_generator, noise_key


def test_the_key_is_created_once_with_mode_0600_and_kept(tmp_path: Path) -> None:
    key = noise_key(tmp_path / "party-2")
    assert (tmp_path / "party-2" / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert noise_key(tmp_path / "party-2") == key
    assert noise_key(tmp_path / "party-3") != key


def test_the_same_place_draws_the_same_noise_and_another_place_other_noise(tmp_path: Path) -> None:
    key = noise_key(tmp_path)
    first = noise_generator(key, "embedding", 2, 0, 5).standard_normal(64)
    np.testing.assert_array_equal(first, noise_generator(key, "embedding", 2, 0, 5).standard_normal(64))
    for other in (noise_generator(key, "embedding", 2, 0, 6), noise_generator(key, "marvell", 2, 0, 5)):
        assert not np.array_equal(first, other.standard_normal(64))
    assert not np.array_equal(first, noise_generator(bytes(32), "embedding", 2, 0, 5).standard_normal(64))


def test_a_damaged_key_is_refused_by_file_name(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE).write_bytes(b"short")
    with pytest.raises(ConfigError, match=KEY_FILE):
        noise_key(tmp_path)
