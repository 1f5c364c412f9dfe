module {
  plan.graph @tiny seq_len 128 {
    plan.mesh @mesh ["dp_shard" = 2]
    plan.policy mixed_muon_adamw zero 3 adamw <lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01> muon <lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.embed_tokens.weight : tensor<256x64xbf16> embedding module "model.embed_tokens" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
    plan.param @model.layers.0.self_attn.q_proj.weight : tensor<64x64xbf16> linear module "model.layers.0.self_attn.q_proj" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.0.self_attn.k_proj.weight : tensor<32x64xbf16> linear module "model.layers.0.self_attn.k_proj" placement #plan.owner<rank = 0, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.0.self_attn.v_proj.weight : tensor<32x64xbf16> linear module "model.layers.0.self_attn.v_proj" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.0.self_attn.o_proj.weight : tensor<64x64xbf16> linear module "model.layers.0.self_attn.o_proj" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.0.mlp.gate_proj.weight : tensor<128x64xbf16> linear module "model.layers.0.mlp.gate_proj" placement #plan.owner<rank = 0, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.0.mlp.up_proj.weight : tensor<128x64xbf16> linear module "model.layers.0.mlp.up_proj" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.0.mlp.down_proj.weight : tensor<64x128xbf16> linear module "model.layers.0.mlp.down_proj" placement #plan.owner<rank = 0, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.0.input_layernorm.weight : tensor<64xbf16> norm module "model.layers.0.input_layernorm" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
    plan.param @model.layers.0.post_attention_layernorm.weight : tensor<64xbf16> norm module "model.layers.0.post_attention_layernorm" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
    plan.param @model.layers.1.self_attn.q_proj.weight : tensor<64x64xbf16> linear module "model.layers.1.self_attn.q_proj" placement #plan.owner<rank = 0, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.1.self_attn.k_proj.weight : tensor<32x64xbf16> linear module "model.layers.1.self_attn.k_proj" placement #plan.owner<rank = 0, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.1.self_attn.v_proj.weight : tensor<32x64xbf16> linear module "model.layers.1.self_attn.v_proj" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.1.self_attn.o_proj.weight : tensor<64x64xbf16> linear module "model.layers.1.self_attn.o_proj" placement #plan.owner<rank = 0, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.1.mlp.gate_proj.weight : tensor<128x64xbf16> linear module "model.layers.1.mlp.gate_proj" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.1.mlp.up_proj.weight : tensor<128x64xbf16> linear module "model.layers.1.mlp.up_proj" placement #plan.owner<rank = 0, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.1.mlp.down_proj.weight : tensor<64x128xbf16> linear module "model.layers.1.mlp.down_proj" placement #plan.owner<rank = 1, axes = ["dp_shard"]> optimizer #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0.01, nesterov = true, ns_steps = 5, scale = match_rms_adamw>
    plan.param @model.layers.1.input_layernorm.weight : tensor<64xbf16> norm module "model.layers.1.input_layernorm" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
    plan.param @model.layers.1.post_attention_layernorm.weight : tensor<64xbf16> norm module "model.layers.1.post_attention_layernorm" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
    plan.param @model.norm.weight : tensor<64xbf16> norm module "model.norm" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
    plan.param @lm_head.weight : tensor<256x64xbf16> output module "lm_head" placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01>
    plan.unit @model.embed_tokens index 0 params [@model.embed_tokens.weight] cost <fwd_flops = 0, bwd_flops = 0, act_bytes = 0, recompute = false> row_layout flat group 0
    plan.unit @model.layers.0 index 1 params [@model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.o_proj.weight, @model.layers.0.mlp.gate_proj.weight, @model.layers.0.mlp.up_proj.weight, @model.layers.0.mlp.down_proj.weight, @model.layers.0.input_layernorm.weight, @model.layers.0.post_attention_layernorm.weight] cost <fwd_flops = 90112, bwd_flops = 180224, act_bytes = 2048, recompute = false> row_layout flat group 0
    plan.unit @model.layers.1 index 2 params [@model.layers.1.self_attn.q_proj.weight, @model.layers.1.self_attn.k_proj.weight, @model.layers.1.self_attn.v_proj.weight, @model.layers.1.self_attn.o_proj.weight, @model.layers.1.mlp.gate_proj.weight, @model.layers.1.mlp.up_proj.weight, @model.layers.1.mlp.down_proj.weight, @model.layers.1.input_layernorm.weight, @model.layers.1.post_attention_layernorm.weight] cost <fwd_flops = 90112, bwd_flops = 180224, act_bytes = 2048, recompute = false> row_layout flat group 1
    plan.unit @lm_head index 3 params [@model.norm.weight, @lm_head.weight] cost <fwd_flops = 32768, bwd_flops = 65536, act_bytes = 1152, recompute = false> row_layout flat group 1
  }
  sched.step @tiny.step mesh @tiny::@mesh world 2 tokens 128 microbatches 1 arena_bytes [1700096, 1700096] peak_bytes [1700096, 1700096] {
    %0 = sched.alloc "row shards g0" bytes 16512 persistent offset 1633536
    %1 = sched.alloc "row grads g0" bytes 16512 persistent offset 1650176
    %2 = sched.alloc "row master+state g0" bytes 99072 persistent offset 1534464
    %3 = sched.alloc "owned g0 r0" bytes 221184 persistent only_rank 0 offset 524288
    %4 = sched.alloc "owned g0 r1" bytes 221184 persistent only_rank 1 offset 524288
    %5 = sched.alloc "owned chunk g0" bytes 0 persistent offset 0
    %6 = sched.alloc "row shards g1" bytes 16640 persistent offset 1666816
    %7 = sched.alloc "row grads g1" bytes 16640 persistent offset 1683456
    %8 = sched.alloc "row master+state g1" bytes 99456 persistent offset 1434880
    %9 = sched.alloc "owned g1 r0" bytes 221184 persistent only_rank 0 offset 745472
    %10 = sched.alloc "owned g1 r1" bytes 221184 persistent only_rank 1 offset 745472
    %11 = sched.alloc "owned chunk g1" bytes 0 persistent offset 0
    %12 = sched.alloc "gathered g0 (forward)" bytes 106752 offset 262144
    %13 = sched.all_gather "bucket all_gather (3 tensors)" %0 -> %12 on ["dp_shard"] ranks 2 bytes 33024 comm 0 phase forward group 0 params [@model.embed_tokens.weight, @model.layers.0.input_layernorm.weight, @model.layers.0.post_attention_layernorm.weight] async : !sched.token
    %14 = sched.all_gather_v "all_gather_v model.layers.0 (forward)" %5 -> %12 on ["dp_shard"] ranks 2 bytes 73728 chunks [36864, 36864] comm 0 phase forward group 0 params [@model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.o_proj.weight, @model.layers.0.mlp.gate_proj.weight, @model.layers.0.mlp.up_proj.weight, @model.layers.0.mlp.down_proj.weight] async : !sched.token
    %15 = sched.alloc "activations model.embed_tokens mb0" bytes 0 offset 0
    %16 = sched.alloc "gathered g1 (forward)" bytes 107008 offset 1114112
    %17 = sched.all_gather "bucket all_gather (4 tensors)" %6 -> %16 on ["dp_shard"] ranks 2 bytes 33280 comm 0 phase forward group 1 params [@model.layers.1.input_layernorm.weight, @model.layers.1.post_attention_layernorm.weight, @model.norm.weight, @lm_head.weight] async : !sched.token
    %18 = sched.all_gather_v "all_gather_v model.layers.1 (forward)" %11 -> %16 on ["dp_shard"] ranks 2 bytes 73728 chunks [36864, 36864] comm 0 phase forward group 1 params [@model.layers.1.self_attn.q_proj.weight, @model.layers.1.self_attn.k_proj.weight, @model.layers.1.self_attn.v_proj.weight, @model.layers.1.self_attn.o_proj.weight, @model.layers.1.mlp.gate_proj.weight, @model.layers.1.mlp.up_proj.weight, @model.layers.1.mlp.down_proj.weight] async : !sched.token
    sched.wait %13
    sched.wait %14
    sched.compute forward "forward model.embed_tokens" unit @model.embed_tokens reads(%12) writes(%15) flops 0.000000e+00 bytes 0 phase forward group 0
    %19 = sched.alloc "activations model.layers.0 mb0" bytes 262144 offset 0
    sched.compute forward "forward model.layers.0" unit @model.layers.0 reads(%12) writes(%19) flops 0x4166000000000000 bytes 0 phase forward group 0
    sched.dealloc %12
    %20 = sched.alloc "activations model.layers.1 mb0" bytes 262144 offset 262144
    sched.wait %17
    sched.wait %18
    sched.compute forward "forward model.layers.1" unit @model.layers.1 reads(%16) writes(%20) flops 0x4166000000000000 bytes 0 phase forward group 1
    %21 = sched.alloc "activations lm_head mb0" bytes 147456 offset 966656
    sched.compute forward "forward lm_head" unit @lm_head reads(%16) writes(%21) flops 0x4150000000000000 bytes 0 phase forward group 1
    sched.dealloc %16
    %22 = sched.alloc "gathered g1 (backward)" bytes 107008 offset 1114112
    %23 = sched.all_gather "bucket all_gather (4 tensors)" %6 -> %22 on ["dp_shard"] ranks 2 bytes 33280 comm 0 phase backward group 1 params [@model.layers.1.input_layernorm.weight, @model.layers.1.post_attention_layernorm.weight, @model.norm.weight, @lm_head.weight] async : !sched.token
    %24 = sched.all_gather_v "all_gather_v model.layers.1 (backward)" %11 -> %22 on ["dp_shard"] ranks 2 bytes 73728 chunks [36864, 36864] comm 0 phase backward group 1 params [@model.layers.1.self_attn.q_proj.weight, @model.layers.1.self_attn.k_proj.weight, @model.layers.1.self_attn.v_proj.weight, @model.layers.1.self_attn.o_proj.weight, @model.layers.1.mlp.gate_proj.weight, @model.layers.1.mlp.up_proj.weight, @model.layers.1.mlp.down_proj.weight] async : !sched.token
    %25 = sched.alloc "unreduced grads g1 mb0" bytes 107008 offset 1221120
    %26 = sched.alloc "gathered g0 (backward)" bytes 106752 offset 1328128
    %27 = sched.all_gather "bucket all_gather (3 tensors)" %0 -> %26 on ["dp_shard"] ranks 2 bytes 33024 comm 0 phase backward group 0 params [@model.embed_tokens.weight, @model.layers.0.input_layernorm.weight, @model.layers.0.post_attention_layernorm.weight] async : !sched.token
    %28 = sched.all_gather_v "all_gather_v model.layers.0 (backward)" %5 -> %26 on ["dp_shard"] ranks 2 bytes 73728 chunks [36864, 36864] comm 0 phase backward group 0 params [@model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.o_proj.weight, @model.layers.0.mlp.gate_proj.weight, @model.layers.0.mlp.up_proj.weight, @model.layers.0.mlp.down_proj.weight] async : !sched.token
    sched.wait %23
    sched.wait %24
    sched.compute backward "backward lm_head" unit @lm_head reads(%22) writes(%25) flops 0x4160000000000000 bytes 0 phase backward group 1
    sched.dealloc %21
    sched.compute backward "backward model.layers.1" unit @model.layers.1 reads(%22) writes(%25) flops 0x4176000000000000 bytes 0 phase backward group 1
    sched.dealloc %20
    sched.dealloc %22
    %29 = sched.reduce_scatter "bucket reduce_scatter (4 tensors)" %25 -> %7 on ["dp_shard"] ranks 2 bytes 33280 comm 0 phase backward group 1 params [@model.norm.weight, @lm_head.weight, @model.layers.1.input_layernorm.weight, @model.layers.1.post_attention_layernorm.weight] async : !sched.token
    %30 = sched.reduce_scatter_v "reduce_scatter_v model.layers.1" %25 -> %11 on ["dp_shard"] ranks 2 bytes 73728 chunks [36864, 36864] comm 0 phase backward group 1 params [@model.layers.1.self_attn.q_proj.weight, @model.layers.1.self_attn.k_proj.weight, @model.layers.1.self_attn.v_proj.weight, @model.layers.1.self_attn.o_proj.weight, @model.layers.1.mlp.gate_proj.weight, @model.layers.1.mlp.up_proj.weight, @model.layers.1.mlp.down_proj.weight] async : !sched.token
    %31 = sched.alloc "unreduced grads g0 mb0" bytes 106752 offset 262144
    sched.wait %27
    sched.wait %28
    sched.compute backward "backward model.layers.0" unit @model.layers.0 reads(%26) writes(%31) flops 0x4176000000000000 bytes 0 phase backward group 0
    sched.wait %29
    sched.wait %30
    sched.dealloc %25
    sched.dealloc %19
    sched.compute backward "backward model.embed_tokens" unit @model.embed_tokens reads(%26) writes(%31) flops 0.000000e+00 bytes 0 phase backward group 0
    sched.dealloc %15
    sched.dealloc %26
    %32 = sched.reduce_scatter "bucket reduce_scatter (3 tensors)" %31 -> %1 on ["dp_shard"] ranks 2 bytes 33024 comm 0 phase backward group 0 params [@model.layers.0.input_layernorm.weight, @model.layers.0.post_attention_layernorm.weight, @model.embed_tokens.weight] async : !sched.token
    %33 = sched.reduce_scatter_v "reduce_scatter_v model.layers.0" %31 -> %5 on ["dp_shard"] ranks 2 bytes 73728 chunks [36864, 36864] comm 0 phase backward group 0 params [@model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.o_proj.weight, @model.layers.0.mlp.gate_proj.weight, @model.layers.0.mlp.up_proj.weight, @model.layers.0.mlp.down_proj.weight] async : !sched.token
    sched.optimizer adamw "adamw rows g1" reads(%7) writes(%6) flops 0.000000e+00 bytes 232064 phase optimizer group 1 params [@model.layers.1.input_layernorm.weight, @model.layers.1.post_attention_layernorm.weight, @model.norm.weight, @lm_head.weight]
    sched.optimizer muon "muon g1 owner 0" reads(%11) writes(%11) flops 0x4173D80000000000 bytes 368640 only_rank 0 phase optimizer group 1 params [@model.layers.1.self_attn.q_proj.weight, @model.layers.1.self_attn.k_proj.weight, @model.layers.1.self_attn.o_proj.weight, @model.layers.1.mlp.up_proj.weight]
    sched.optimizer muon "muon g1 owner 1" reads(%11) writes(%11) flops 0x4172980000000000 bytes 368640 only_rank 1 phase optimizer group 1 params [@model.layers.1.self_attn.v_proj.weight, @model.layers.1.mlp.gate_proj.weight, @model.layers.1.mlp.down_proj.weight]
    sched.wait %32
    sched.optimizer adamw "adamw rows g0" reads(%1) writes(%0) flops 0.000000e+00 bytes 231168 phase optimizer group 0 params [@model.embed_tokens.weight, @model.layers.0.input_layernorm.weight, @model.layers.0.post_attention_layernorm.weight]
    sched.wait %33
    sched.optimizer muon "muon g0 owner 0" reads(%5) writes(%5) flops 0x4172980000000000 bytes 368640 only_rank 0 phase optimizer group 0 params [@model.layers.0.self_attn.k_proj.weight, @model.layers.0.mlp.gate_proj.weight, @model.layers.0.mlp.down_proj.weight]
    sched.optimizer muon "muon g0 owner 1" reads(%5) writes(%5) flops 0x4173D80000000000 bytes 368640 only_rank 1 phase optimizer group 0 params [@model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.o_proj.weight, @model.layers.0.mlp.up_proj.weight]
    sched.dealloc %31
  }
}

