"""The example task: a small MLP on a learnable synthetic regression, identical on every
rank for a given seed."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class SimpleNet(torch.nn.Module):
    """The write-up's model: 10 -> hidden -> 10."""

    def __init__(self, hidden: int = 50):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, hidden)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class SyntheticRegression(Dataset):
    """Inputs x ~ N(0, 1)^10 and targets of a fixed random teacher
    y = x W + 0.1 sin(3 x V): the same on every rank for a given seed,
    learnable by SimpleNet (its loss can fall far below the initial ~1)."""

    def __init__(self, size: int, seed: int):
        g = torch.Generator().manual_seed(seed + 10_007)  # independent of the model-init stream
        self.x = torch.randn(size, 10, generator=g)
        w = torch.randn(10, 10, generator=g) / 10 ** 0.5
        v = torch.randn(10, 10, generator=g) / 10 ** 0.5
        self.y = self.x @ w + 0.1 * torch.sin(3 * self.x @ v)

    def __len__(self):
        return self.x.shape[0]

    def __getitem__(self, i):
        return self.x[i], self.y[i]
