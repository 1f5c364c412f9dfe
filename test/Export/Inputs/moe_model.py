"""A small MoE model with transformers 5's expert layout, for the exporter's
tests: each block's experts are one module holding fused 3-D tensors,
gate_up_proj [E, 2I, H] (expert e's gate rows, then its up rows) and down_proj
[E, H, I], routed by a `gate` router whose top-k choice is read back as
values (so exporting needs device=None, as with transformers' MoE models).
Block 1 shares block 0's down_proj (a tied fused tensor).

Sizes (used by check_moe.py): vocab 64, hidden 32, 4 experts of intermediate
16, top-2, 2 blocks, batch 2, sequence 8."""
import torch
from torch import nn

VOCAB, HIDDEN, EXPERTS, INTER, TOPK, LAYERS, BATCH, SEQ = 64, 32, 4, 16, 2, 2, 2, 8


class Experts(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.randn(EXPERTS, 2 * INTER, HIDDEN) * 0.1)
        self.down_proj = nn.Parameter(torch.randn(EXPERTS, HIDDEN, INTER) * 0.1)

    def forward(self, x, index, weight):
        out = torch.zeros_like(x)
        for e in index.unique().tolist():  # the experts hit: values, not shapes
            tok, slot = torch.where(index == e)
            gate, up = nn.functional.linear(x[tok], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = nn.functional.linear(nn.functional.silu(gate) * up, self.down_proj[e])
            out.index_add_(0, tok, y * weight[tok, slot, None])
        return out


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.experts = Experts()

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, HIDDEN)
        weight, index = self.gate(x).softmax(-1).topk(TOPK, dim=-1)
        return self.experts(x, index, weight).reshape(shape)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(HIDDEN)
        self.proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.mlp = MoE()

    def forward(self, x):
        x = x + self.proj(self.norm(x))
        return x + self.mlp(x)


class MoELM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.layers[1].mlp.experts.down_proj = self.layers[0].mlp.experts.down_proj
        self.norm = nn.RMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def build():
    torch.manual_seed(0)
    model = MoELM()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return {"model": model, "example_inputs": (ids,), "name": "small-moe"}
