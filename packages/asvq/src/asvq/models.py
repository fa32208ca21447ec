"""A small tokenizer autoencoder around any quantizer: encoder → T tokens of width d → quantizer → decoder."""

from __future__ import annotations

import torch
from torch import nn

from papershelf.errors import InputError, check_int


class VQAutoencoder(nn.Module):
    """``x (B, D) → encoder → (B, T·d) → (B, T, d) → quantizer → decoder → (B, D)``.

    ``forward`` returns ``(reconstruction, indices (B, T), quantizer loss)``.
    """

    def __init__(self, encoder: nn.Module, decoder: nn.Module, quantizer: nn.Module, tokens: int, dim: int):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.quantizer = quantizer
        self.tokens = check_int("tokens", tokens, low=1)
        self.dim = check_int("dim", dim, low=1)
        first = encoder[0] if isinstance(encoder, nn.Sequential) and len(encoder) else None
        self.in_features = first.in_features if isinstance(first, nn.Linear) else None  # None: not checked

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x).view(x.shape[0], self.tokens, self.dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = self.in_features or getattr(x, "shape", (0, 0))[-1]
        if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.shape[1] != features:
            raise InputError(
                f"x must be a (batch, {features}) tensor, got shape {tuple(getattr(x, 'shape', ()))}"
            )
        if not x.is_floating_point():
            raise InputError(f"x must be floating point, got {x.dtype}")
        quantized, indices, loss = self.quantizer(self.encode(x))
        return self.decoder(quantized.reshape(x.shape[0], -1)), indices, loss


def mlp_autoencoder(
    in_features: int, quantizer: nn.Module, *, tokens: int = 8, dim: int = 16, hidden: int = 256
) -> VQAutoencoder:
    """Two-layer MLP encoder and decoder around ``quantizer`` (whose ``dim`` must equal ``dim``)."""
    for name, value in (("in_features", in_features), ("tokens", tokens), ("dim", dim), ("hidden", hidden)):
        check_int(name, value, low=1)
    if getattr(quantizer, "dim", dim) != dim:
        raise InputError(f"quantizer has dim={quantizer.dim} but the autoencoder latent dim is {dim}")
    encoder = nn.Sequential(nn.Linear(in_features, hidden), nn.GELU(), nn.Linear(hidden, tokens * dim))
    decoder = nn.Sequential(nn.Linear(tokens * dim, hidden), nn.GELU(), nn.Linear(hidden, in_features))
    return VQAutoencoder(encoder, decoder, quantizer, tokens, dim)
