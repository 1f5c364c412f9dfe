module {
  plan.graph @tiny seq_len 128 {
    plan.mesh @mesh ["dp_shard" = 4]
    plan.policy mixed_muon_adamw zero 3
    plan.param @model.embed_tokens.weight : tensor<256x64xbf16> embedding module "model.embed_tokens"
    plan.param @model.layers.0.self_attn.q_proj.weight : tensor<64x64xbf16> linear module "model.layers.0.self_attn.q_proj"
    plan.param @model.layers.0.self_attn.k_proj.weight : tensor<32x64xbf16> linear module "model.layers.0.self_attn.k_proj"
    plan.param @model.layers.0.self_attn.v_proj.weight : tensor<32x64xbf16> linear module "model.layers.0.self_attn.v_proj"
    plan.param @model.layers.0.self_attn.o_proj.weight : tensor<64x64xbf16> linear module "model.layers.0.self_attn.o_proj"
    plan.param @model.layers.0.mlp.gate_proj.weight : tensor<128x64xbf16> linear module "model.layers.0.mlp.gate_proj"
    plan.param @model.layers.0.mlp.up_proj.weight : tensor<128x64xbf16> linear module "model.layers.0.mlp.up_proj"
    plan.param @model.layers.0.mlp.down_proj.weight : tensor<64x128xbf16> linear module "model.layers.0.mlp.down_proj"
    plan.param @model.layers.0.input_layernorm.weight : tensor<64xbf16> norm module "model.layers.0.input_layernorm"
    plan.param @model.layers.0.post_attention_layernorm.weight : tensor<64xbf16> norm module "model.layers.0.post_attention_layernorm"
    plan.param @model.layers.1.self_attn.q_proj.weight : tensor<64x64xbf16> linear module "model.layers.1.self_attn.q_proj"
    plan.param @model.layers.1.self_attn.k_proj.weight : tensor<32x64xbf16> linear module "model.layers.1.self_attn.k_proj"
    plan.param @model.layers.1.self_attn.v_proj.weight : tensor<32x64xbf16> linear module "model.layers.1.self_attn.v_proj"
    plan.param @model.layers.1.self_attn.o_proj.weight : tensor<64x64xbf16> linear module "model.layers.1.self_attn.o_proj"
    plan.param @model.layers.1.mlp.gate_proj.weight : tensor<128x64xbf16> linear module "model.layers.1.mlp.gate_proj"
    plan.param @model.layers.1.mlp.up_proj.weight : tensor<128x64xbf16> linear module "model.layers.1.mlp.up_proj"
    plan.param @model.layers.1.mlp.down_proj.weight : tensor<64x128xbf16> linear module "model.layers.1.mlp.down_proj"
    plan.param @model.layers.1.input_layernorm.weight : tensor<64xbf16> norm module "model.layers.1.input_layernorm"
    plan.param @model.layers.1.post_attention_layernorm.weight : tensor<64xbf16> norm module "model.layers.1.post_attention_layernorm"
    plan.param @model.norm.weight : tensor<64xbf16> norm module "model.norm"
    plan.param @lm_head.weight : tensor<256x64xbf16> output module "lm_head"
    plan.unit @model.embed_tokens index 0 params [@model.embed_tokens.weight] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false>
    plan.unit @model.layers.0 index 1 params [@model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.o_proj.weight, @model.layers.0.mlp.gate_proj.weight, @model.layers.0.mlp.up_proj.weight, @model.layers.0.mlp.down_proj.weight, @model.layers.0.input_layernorm.weight, @model.layers.0.post_attention_layernorm.weight] cost <fwd_flops = 90112, bwd_flops = 180224, act_bytes = 2048, recompute = false>
    plan.unit @model.layers.1 index 2 params [@model.layers.1.self_attn.q_proj.weight, @model.layers.1.self_attn.k_proj.weight, @model.layers.1.self_attn.v_proj.weight, @model.layers.1.self_attn.o_proj.weight, @model.layers.1.mlp.gate_proj.weight, @model.layers.1.mlp.up_proj.weight, @model.layers.1.mlp.down_proj.weight, @model.layers.1.input_layernorm.weight, @model.layers.1.post_attention_layernorm.weight] cost <fwd_flops = 90112, bwd_flops = 180224, act_bytes = 2048, recompute = false>
    plan.unit @lm_head index 3 params [@model.norm.weight, @lm_head.weight] cost <fwd_flops = 32768, bwd_flops = 65536, act_bytes = 1152, recompute = false>
  }
}
