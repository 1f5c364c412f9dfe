"""A tiny transformers 5 Qwen3-MoE (fused experts: mlp.experts.gate_up_proj
[4, 32, 32] and down_proj [4, 32, 16] per layer), for export-hf-qwen3-moe.test."""
import torch
import transformers


def build():
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_experts=4, num_experts_per_tok=2)
    model = transformers.Qwen3MoeForCausalLM(cfg)
    ids = torch.randint(0, 96, (2, 16))
    return {"model": model, "example_inputs": (ids,), "name": "tiny-qwen3-moe"}
