"""The models the recordings train: a pre-LN transformer (SDPA attention), a plain MLP, and torchvision's AlexNet."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x)))), causal SDPA attention."""

    def __init__(self, d: int, heads: int, ff: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Blocks(nn.Module):
    """A stack of Blocks, optionally with the token embedding in front and the LM head behind (a pipeline stage)."""

    def __init__(self, n: int, d: int, heads: int, ff: int, vocab: int, embed: bool = False, head: bool = False):
        super().__init__()
        self.embed = nn.Embedding(vocab, d) if embed else None
        self.layers = nn.ModuleList([Block(d, heads, ff) for _ in range(n)])
        self.norm = nn.LayerNorm(d) if head else None
        self.head = nn.Linear(d, vocab, bias=False) if head else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def mlp(width: int, layers: int, act: type[nn.Module] = nn.ReLU, bias: bool = False) -> nn.Sequential:
    """layers x (Linear(width, width) + act)."""
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(width, width, bias=bias), act()]
    return nn.Sequential(*mods)


class AlexNet(nn.Module):
    """torchvision.models.AlexNet, layer for layer (features / avgpool / classifier), so module paths match."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))
