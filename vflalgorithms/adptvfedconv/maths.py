"""AdptVFedConv's mathematics and networks (seed 003 §3.2–§3.3, Algorithm 1), shared by both daemons.

Images are cut by position into pieces on a grid; party 1 (the active party, with the labels)
holds one piece, each passive party another. The networks:

- the feature extractor W_e: conv blocks then one max-pool (003 §4: "the first two convolution
  layers with the first max pool layer"), with zero or replication padding at the piece's edges
  (§3.3: replication keeps a boundary pixel's neighbours closer to the real ones);
- W_clst, the small classifier the active party pre-trains W_e^1 with (phase 1), then drops;
- W_g, a passive party's decoder mirroring W_e (upsampling for the pool, ConvTranspose for each
  conv), to fine-tune W_e^k as an autoencoder on the party's own piece (phase 2, Eq. 3);
- W_s, the server classifier over the full feature map the pieces' maps are placed into by
  position (phase 3, Eq. 4–5).

A party's CSV holds its piece row-major, channel-major: ``channels × height × width`` columns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from vflalgorithms.options import algorithm_options
from vflcore.errors import ConfigError
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.models import mlp

NAME = "adptvfedconv"
#: The extractor's weights on their way to the passive parties: one tensor per parameter name.
EXTRACTOR_PREFIX = "adptvfedconv/extractor/"
#: The ``[model]`` keys of the active party's own extractor and classifier (``vflalgorithms.factories``).
EXTRACTOR_FACTORY, CLASSIFIER_FACTORY = "extractor_factory", "classifier_factory"


@dataclass(frozen=True)
class Geometry:
    """Where each party's piece sits, and the shapes that follow from it."""

    channels: int  # of the image
    piece: tuple[int, int]  # height, width of every piece
    grid: tuple[int, int]  # pieces per column, per row
    positions: Mapping[int, tuple[int, int]]  # party -> (grid row, grid column)
    width: int  # feature channels of W_e

    @property
    def piece_features(self) -> int:
        """CSV columns of one piece."""
        return self.channels * self.piece[0] * self.piece[1]

    @property
    def map_shape(self) -> tuple[int, int, int]:
        """One piece's feature map H^k: width × (height / 2) × (width / 2), after the max-pool."""
        return (self.width, self.piece[0] // 2, self.piece[1] // 2)

    @property
    def map_features(self) -> int:
        c, h, w = self.map_shape
        return c * h * w

    def image(self, pieces: Mapping[int, torch.Tensor]) -> torch.Tensor:
        """(rows, channels·h·w) pieces per party → (rows, channels, H, W) images, placed by position."""
        return _place(pieces, self.positions, (self.channels, *self.piece), self.grid)

    def full_map(self, maps: Mapping[int, torch.Tensor]) -> torch.Tensor:
        """(rows, map_features) maps per party → the full map (rows, width, H/2, W/2), placed by position (Eq. 4)."""
        return _place(maps, self.positions, self.map_shape, self.grid)


def _place(
    parts: Mapping[int, torch.Tensor],
    positions: Mapping[int, tuple[int, int]],
    shape: tuple[int, int, int],
    grid: tuple[int, int],
) -> torch.Tensor:
    """Tile the parts into one (rows, c, h·grid_rows, w·grid_cols) tensor; an empty cell is zeros.

    Built by concatenation rather than by writing into a tensor of a fixed row count, so that the
    ONNX export (``vflcore.ml.onnx_export``) keeps the batch dimension free.
    """
    c, h, w = shape
    blocks = {cell: parts[party].reshape(-1, c, h, w) for party, cell in positions.items()}
    empty = torch.zeros_like(next(iter(blocks.values())))
    rows = [torch.cat([blocks.get((gr, gc), empty) for gc in range(grid[1])], dim=3) for gr in range(grid[0])]
    return torch.cat(rows, dim=2)


def full_map_shape(geo: Geometry) -> tuple[int, int, int]:
    """The full map W_s classifies: (width, H/2, W/2) with every piece's map in place."""
    c, h, w = geo.map_shape
    return (c, h * geo.grid[0], w * geo.grid[1])


def geometry(job: JobSpec) -> Geometry:
    """The job's piece layout from its options; every party in the job must have a position."""
    options = algorithm_options(NAME, job.algorithm_options)
    piece = tuple(int(v) for v in options["piece"])
    grid = tuple(int(v) for v in options["grid"])
    parties = [ACTIVE_PARTY, *sorted(job.passive_parties)]
    given = options["positions"]
    if given:
        positions = {int(p): (int(rc[0]), int(rc[1])) for p, rc in given.items()}
    else:  # row-major: the active party's piece first, then the passive parties in id order
        positions = {p: divmod(i, grid[1]) for i, p in enumerate(parties)}
    missing = [p for p in parties if p not in positions]
    if missing:
        raise ConfigError(f"[algorithm] positions has no piece for party {missing[0]} (parties: {parties})")
    cells = [positions[p] for p in parties]
    if len(set(cells)) != len(cells) or any(not (0 <= r < grid[0] and 0 <= c < grid[1]) for r, c in cells):
        raise ConfigError(f"[algorithm] positions {cells} must be distinct cells of the {grid[0]}x{grid[1]} grid")
    if len(parties) != grid[0] * grid[1]:
        raise ConfigError(
            f"[algorithm] a {grid[0]}x{grid[1]} grid needs {grid[0] * grid[1]} parties, got {len(parties)}"
        )
    return Geometry(
        channels=int(options["image_channels"]),
        piece=(piece[0], piece[1]),
        grid=(grid[0], grid[1]),
        positions={p: positions[p] for p in parties},
        width=int(options["channels"]),
    )


Padding = Literal["zeros", "replicate"]
_PADDING: dict[str, Padding] = {"replication": "replicate", "zero": "zeros"}


def padding(job: JobSpec) -> Padding:
    """torch's padding_mode for the piece edges: "replicate" (003 §3.3) or "zeros"."""
    return _PADDING[str(algorithm_options(NAME, job.algorithm_options)["padding"])]


def extractor(in_channels: int, width: int, padding_mode: Padding) -> nn.Sequential:
    """W_e: two 3×3 conv blocks (same size) and one 2×2 max-pool."""
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1, padding_mode=padding_mode),
        nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1, padding_mode=padding_mode),
        nn.ReLU(),
        nn.MaxPool2d(2),
    )


def decoder(in_channels: int, width: int) -> nn.Sequential:
    """W_g: W_e mirrored (upsampling for the pool, a ConvTranspose for each conv)."""
    return nn.Sequential(
        nn.Upsample(scale_factor=2),
        nn.ConvTranspose2d(width, width, 3, padding=1),
        nn.ReLU(),
        nn.ConvTranspose2d(width, in_channels, 3, padding=1),
    )


def pretrain_classifier(shape: tuple[int, int, int], outputs: int) -> nn.Sequential:
    """W_clst: the small head phase 1 trains W_e^1 with; dropped afterwards (003 §3.2.1)."""
    c, h, w = shape
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, outputs))


def server_classifier(
    width: int, map_hw: tuple[int, int], outputs: int, hidden: Sequence[int], *, dropout: float = 0.0
) -> nn.Sequential:
    """W_s: a conv block over the full map, then fully connected layers (003 §4, scaled to digits)."""
    h, w = map_hw
    layers: list[nn.Module] = [nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU()]
    if h >= 2 and w >= 2:
        layers.append(nn.MaxPool2d(2))
        h, w = h // 2, w // 2
    layers.append(nn.Flatten())
    n_in = 2 * width * h * w
    layers.extend(mlp(n_in, hidden, outputs, dropout=dropout))
    return nn.Sequential(*layers)


def extractor_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """W_e's parameters by name, as the broadcast sends them (float32, contiguous)."""
    return {name: p.detach().to(torch.float32).contiguous() for name, p in model.state_dict().items()}


def options_of(job: JobSpec) -> dict[str, Any]:
    return algorithm_options(NAME, job.algorithm_options)


def extractor_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over W_e's tensors in name order: both ends log it, so a broadcast can be checked bit for bit."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].cpu().numpy().tobytes())
    return digest.hexdigest()
