"""A small transformer for the exporter's tests: token embedding, 3 blocks
(RMSNorm, attention with q/k/v/o projections written as plain matmuls so the
FLOPs are easy to count by hand, LayerNorm, a GELU MLP with biases), a final
RMSNorm and an output head tied to the embedding. layers.1.attn.q is frozen.

Sizes (used by check_small.py): vocab 64, hidden 32, 4 heads of 8, MLP 64,
batch 2, sequence 16."""
import torch
from torch import nn

VOCAB, HIDDEN, HEADS, MLP, LAYERS, BATCH, SEQ = 64, 32, 4, 64, 3, 2, 16


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        split = lambda t: t.view(b, s, HEADS, HIDDEN // HEADS).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = (q @ k.transpose(-1, -2)) * (HIDDEN // HEADS) ** -0.5
        out = scores.softmax(-1) @ v
        return self.o(out.transpose(1, 2).reshape(b, s, HIDDEN))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = nn.RMSNorm(HIDDEN)
        self.attn = Attention()
        self.mlp_norm = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, MLP)
        self.down = nn.Linear(MLP, HIDDEN)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.down(nn.functional.gelu(self.up(self.mlp_norm(x))))


class SmallLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.lm_head.weight = self.embed.weight
        self.layers[1].attn.q.weight.requires_grad_(False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def build():
    torch.manual_seed(0)
    model = SmallLM()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return {"model": model, "example_inputs": (ids,), "name": "small-lm"}


def build_meta():
    """The same model built on the meta device: no memory for weights."""
    with torch.device("meta"):
        model = SmallLM()
    ids = torch.zeros(BATCH, SEQ, dtype=torch.long, device="meta")
    return {"model": model, "example_inputs": (ids,), "name": "small-lm"}
