"""AdptVFedConv's geometry (003 §3.2.3, Eq. 4): placement by position, map shapes, edge padding (§3.3), options."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from bench.algorithms.adptvfedconv_runs import party_pieces
from vflalgorithms.adptvfedconv import maths as conv
from vflalgorithms.options import algorithm_options
from vflcore.errors import ConfigError
from vflcore.job.spec import JobSpec
from vflcore.ml.models import build_seeded


def _job(passive: tuple[int, ...] = (2, 3, 4), **options: Any) -> JobSpec:
    return JobSpec(job_id="geometry", algorithm=conv.NAME, passive_parties=passive, algorithm_options=options)


def _split_by_hand(image: np.ndarray) -> dict[int, np.ndarray]:
    """The four 4x4 quadrants of one 8x8 image, row-major, written out slice by slice."""
    return {
        1: image[0:4, 0:4].reshape(-1),
        2: image[0:4, 4:8].reshape(-1),
        3: image[4:8, 0:4].reshape(-1),
        4: image[4:8, 4:8].reshape(-1),
    }


class TestPlacement:
    def test_default_positions_are_row_major(self) -> None:
        """Party 1 takes the top-left cell, then the passive parties in id order, row by row."""
        assert conv.geometry(_job()).positions == {1: (0, 0), 2: (0, 1), 3: (1, 0), 4: (1, 1)}

    def test_full_map_puts_each_party_in_its_cell(self) -> None:
        """Each party's map, filled with its own id, lands exactly in its grid cell and nowhere else."""
        geo = conv.geometry(_job())
        c, h, w = geo.map_shape
        maps = {p: torch.full((3, geo.map_features), float(p)) for p in geo.positions}
        full = geo.full_map(maps)
        assert full.shape == (3, c, 2 * h, 2 * w)
        for party, (r, col) in geo.positions.items():
            assert torch.equal(
                full[:, :, r * h : (r + 1) * h, col * w : (col + 1) * w], maps[party].reshape(3, c, h, w)
            )

    def test_full_map_keeps_channel_and_pixel_order(self) -> None:
        """A map's flattened values (channel-major) keep their channel, row and column inside the cell."""
        geo = conv.geometry(_job())
        _, h, w = geo.map_shape
        maps = {p: torch.arange(geo.map_features, dtype=torch.float32).reshape(1, -1) + 1000 * p for p in geo.positions}
        full = geo.full_map(maps)
        # party 4 sits at cell (1, 1): its value for channel 5, row 1, column 0 is at (5, h + 1, w + 0)
        assert float(full[0, 5, h + 1, w]) == 4000 + 5 * h * w + 1 * w + 0

    def test_explicit_positions_are_honoured(self) -> None:
        """Given positions override row-major order: the active party can hold the bottom-right piece."""
        positions = {"1": [1, 1], "2": [0, 0], "3": [0, 1], "4": [1, 0]}
        geo = conv.geometry(_job(positions=positions))
        image = geo.image({p: torch.full((1, geo.piece_features), float(p)) for p in geo.positions})
        assert float(image[0, 0, 7, 7]) == 1.0
        assert float(image[0, 0, 0, 0]) == 2.0

    def test_quadrants_of_a_real_digit_reassemble_to_the_image(self) -> None:
        """Cutting digits into quadrants by hand and placing them back with ``image`` gives the original pixels."""
        digits = load_digits().images[:5].astype(np.float32) / 16.0
        geo = conv.geometry(_job())
        pieces = {p: torch.from_numpy(np.stack([_split_by_hand(d)[p] for d in digits])) for p in range(1, 5)}
        assert torch.equal(geo.image(pieces)[:, 0], torch.from_numpy(digits))

    def test_bench_split_is_the_inverse_of_image(self) -> None:
        """The experiment's ``party_pieces`` cuts the same quadrants as the hand split, and ``image`` undoes it."""
        digits = torch.from_numpy(load_digits().images[:5].astype(np.float32) / 16.0).unsqueeze(1)
        geo = conv.geometry(_job())
        pieces = party_pieces(digits, geo)
        for party, piece in pieces.items():
            assert torch.equal(piece[0], torch.from_numpy(_split_by_hand(digits[0, 0].numpy())[party]))
        assert torch.equal(geo.image(pieces), digits)


class TestShapes:
    def test_default_geometry(self) -> None:
        """4x4 pieces of one channel, W_e of 16 channels: a 16x2x2 map per piece, a 16x4x4 full map."""
        geo = conv.geometry(_job())
        assert geo.piece_features == 16
        assert geo.map_shape == (16, 2, 2)
        assert geo.map_features == 64

    def test_networks_agree_with_the_geometry(self) -> None:
        """W_e maps a piece to map_shape, W_g maps it back to the piece, W_s reads the full map."""
        geo = conv.geometry(_job())
        pieces = torch.rand(7, geo.channels, *geo.piece)
        maps = conv.extractor(geo.channels, geo.width, "replicate")(pieces)
        assert maps.shape == (7, *geo.map_shape)
        assert conv.decoder(geo.channels, geo.width)(maps).shape == pieces.shape
        assert conv.pretrain_classifier(geo.map_shape, 10)(maps).shape == (7, 10)
        full = geo.full_map({p: maps.reshape(7, -1) for p in geo.positions})
        assert conv.server_classifier(geo.width, (4, 4), 10, (64,))(full).shape == (7, 10)

    def test_whole_image_map_is_the_full_map_size(self) -> None:
        """The centralised bound's W_e on the 8x8 image gives a map the size of the placed full map."""
        geo = conv.geometry(_job())
        whole = conv.extractor(1, geo.width, "replicate")(torch.rand(2, 1, 8, 8))
        assert whole.shape == geo.full_map({p: torch.zeros(2, geo.map_features) for p in geo.positions}).shape


class TestPadding:
    @staticmethod
    def _pair() -> tuple[torch.nn.Module, torch.nn.Module]:
        """The same W_e weights, once with replication padding and once with zero padding."""
        replicate = build_seeded(lambda: conv.extractor(1, 4, "replicate"), 0)
        zeros = conv.extractor(1, 4, "zeros")
        zeros.load_state_dict(replicate.state_dict())
        return replicate, zeros

    def test_job_padding_maps_to_torch_modes(self) -> None:
        """replication → "replicate" (the default, §3.3), zero → "zeros"."""
        assert conv.padding(_job()) == "replicate"
        assert conv.padding(_job(padding="zero")) == "zeros"

    def test_edges_differ_interior_agrees(self) -> None:
        """With the same weights, the first conv's edge outputs differ between the modes; the interior does not."""
        replicate, zeros = self._pair()
        x = torch.rand(3, 1, 4, 4, generator=torch.Generator().manual_seed(1)) + 0.5
        a, b = replicate[0](x), zeros[0](x)
        assert torch.equal(a[:, :, 1:3, 1:3], b[:, :, 1:3, 1:3])
        edge = torch.ones(4, 4, dtype=torch.bool)
        edge[1:3, 1:3] = False
        assert (a[:, :, edge] - b[:, :, edge]).abs().min() > 0
        assert not torch.allclose(replicate(x), zeros(x))

    def test_replication_hides_the_cut_of_a_flat_image(self) -> None:
        """On a constant piece replication padding gives a constant first-conv output, as the uncut image would."""
        replicate, zeros = self._pair()
        x = torch.full((1, 1, 4, 4), 0.7)
        a, b = replicate[0](x), zeros[0](x)
        assert torch.allclose(a, a[:, :, :1, :1].expand_as(a))
        assert not torch.allclose(b, b[:, :, 1:2, 1:2].expand_as(b))


class TestOptions:
    @pytest.mark.parametrize(
        ("given", "key"),
        [
            ({"grid": [2]}, "grid"),
            ({"grid": [2, 0]}, "grid"),
            ({"piece": [3, 4]}, "piece"),
            ({"piece": [4, 5]}, "piece"),
            ({"piece": "4x4"}, "piece"),
            ({"padding": "reflect"}, "padding"),
            ({"positions": {"2": [0]}}, "positions"),
            ({"positions": {"two": [0, 1]}}, "positions"),
            ({"positions": [[0, 0]]}, "positions"),
            ({"channels": 0}, "channels"),
            ({"pretrain_epochs": 1.5}, "pretrain_epochs"),
            ({"encoder_lr": 0}, "encoder_lr"),
            ({"strides": 2}, "strides"),
        ],
    )
    def test_bad_option_names_its_key(self, given: dict[str, Any], key: str) -> None:
        """Every malformed option is refused up front, naming the key the user has to fix."""
        with pytest.raises(ConfigError, match=key):
            algorithm_options(conv.NAME, given)

    def test_defaults_are_the_papers_setup(self) -> None:
        """With nothing given: 2x2 grid of 4x4 pieces, replication padding, encoder lr 1e-5 and decoder lr 1e-3."""
        options = algorithm_options(conv.NAME, {})
        assert (options["grid"], options["piece"], options["padding"]) == ([2, 2], [4, 4], "replication")
        assert (options["encoder_lr"], options["decoder_lr"]) == (1e-5, 1e-3)

    @pytest.mark.parametrize(
        ("passive", "options", "key"),
        [
            ((2, 3, 4), {"positions": {"1": [0, 0], "2": [0, 0], "3": [1, 0], "4": [1, 1]}}, "positions"),
            ((2, 3, 4), {"positions": {"1": [0, 0], "2": [0, 1], "3": [1, 0], "4": [2, 1]}}, "positions"),
            ((2, 3, 4), {"positions": {"1": [0, 0], "2": [0, 1], "3": [1, 0]}}, "positions"),
            ((2, 3), {}, "grid"),
            (
                (2, 3, 4),
                {"grid": [1, 2], "positions": {"1": [0, 0], "2": [0, 1], "3": [0, 1], "4": [0, 0]}},
                "positions",
            ),
        ],
    )
    def test_geometry_refuses_a_layout_that_does_not_fit_the_job(
        self, passive: tuple[int, ...], options: dict[str, Any], key: str
    ) -> None:
        """Duplicate, off-grid or missing cells, and a grid that is not one cell per party, are ConfigErrors."""
        with pytest.raises(ConfigError, match=key):
            conv.geometry(_job(passive, **options))
