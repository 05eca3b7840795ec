"""The zoo's own small torch modules: recurrent nets (LSTM, GRU), a UNet and a temporal
convolution network, the kinds of model that timm and transformers do not cover."""
from __future__ import annotations

from typing import Any, List

from .spec import Built, ZooModel

SEED = 0


def _recurrent(kind: str) -> Built:
    import torch

    class Rnn(torch.nn.Module):
        """Token embedding -> 2 recurrent layers (hidden 256) -> a 1000-way head per step."""

        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(1000, 128)
            cell = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
            self.rnn = cell(128, 256, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(256, 1000)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            y, _ = self.rnn(self.emb(ids))
            return self.head(y)

    torch.manual_seed(SEED)
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(SEED + 1))
    return Built(Rnn().eval(), (ids,), ["ids"], ["logits"])


def _lstm() -> Built:
    return _recurrent("lstm")


def _gru() -> Built:
    return _recurrent("gru")


def _block(torch: Any, cin: int, cout: int) -> Any:
    return torch.nn.Sequential(
        torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.BatchNorm2d(cout), torch.nn.ReLU(inplace=True),
        torch.nn.Conv2d(cout, cout, 3, padding=1), torch.nn.BatchNorm2d(cout), torch.nn.ReLU(inplace=True))


def _unet() -> Built:
    import torch

    class UNet(torch.nn.Module):
        """A 4-level UNet (16-128 channels): max-pool down, ConvTranspose up, skip concats."""

        def __init__(self, ch: tuple = (16, 32, 64, 128)) -> None:
            super().__init__()
            self.down = torch.nn.ModuleList()
            cin = 3
            for c in ch:
                self.down.append(_block(torch, cin, c))
                cin = c
            self.up = torch.nn.ModuleList()
            self.dec = torch.nn.ModuleList()
            for c in reversed(ch[:-1]):
                self.up.append(torch.nn.ConvTranspose2d(cin, c, 2, stride=2))
                self.dec.append(_block(torch, 2 * c, c))
                cin = c
            self.out = torch.nn.Conv2d(cin, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            skips = []
            for i, d in enumerate(self.down):
                x = d(x if i == 0 else torch.nn.functional.max_pool2d(x, 2))
                skips.append(x)
            for up, dec, s in zip(self.up, self.dec, reversed(skips[:-1])):
                x = dec(torch.cat([up(x), s], dim=1))
            return self.out(x)

    torch.manual_seed(SEED)
    x = torch.randn(1, 3, 128, 128, generator=torch.Generator().manual_seed(SEED + 1))
    return Built(UNet().eval(), (x,), ["image"], ["mask"])


def _tcn() -> Built:
    import torch

    class TCN(torch.nn.Module):
        """6 residual blocks of dilated causal Conv1d (dilation 1..32, 64 channels, kernel 3)."""

        def __init__(self, ch: int = 64, levels: int = 6) -> None:
            super().__init__()
            self.inp = torch.nn.Conv1d(8, ch, 1)
            self.convs = torch.nn.ModuleList(
                torch.nn.Conv1d(ch, ch, 3, dilation=2 ** i, padding=2 * 2 ** i) for i in range(levels))
            self.head = torch.nn.Conv1d(ch, 4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.inp(x)
            n = x.shape[-1]
            for c in self.convs:
                x = x + torch.relu(c(x)[..., :n])  # causal: drop the right padding
            return self.head(x)

    torch.manual_seed(SEED)
    x = torch.randn(1, 8, 1024, generator=torch.Generator().manual_seed(SEED + 1))
    return Built(TCN().eval(), (x,), ["series"], ["out"])


MODELS: List[ZooModel] = [
    ZooModel("lstm", "own", "2-layer LSTM (hidden 256) over 64 tokens, 1000-way head", _lstm),
    ZooModel("gru", "own", "2-layer GRU (hidden 256) over 64 tokens, 1000-way head", _gru),
    ZooModel("unet", "own", "4-level UNet, 16-128 channels, 128x128", _unet),
    ZooModel("tcn", "own", "TCN: 6 dilated causal Conv1d residual blocks, 64 channels, 1024 steps", _tcn),
]
