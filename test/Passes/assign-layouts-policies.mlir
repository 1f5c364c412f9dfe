// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts=policy=adamw | FileCheck %s --check-prefix=ADAMW
// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts=policy=sgd | FileCheck %s --check-prefix=SGD
// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts=policy=muon | FileCheck %s --check-prefix=MUON
// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts=policy=mixed_muon_adamw | FileCheck %s --check-prefix=MIXED
// RUN: mfsdp-opt %S/Inputs/roles.mlir --mfsdp-assign-layouts="policy=mixed_muon_adamw muon-embedding=true muon-router=true" | FileCheck %s --check-prefix=KNOBS

// adamw: every managed parameter row-sharded over dp_shard with AdamW; the
// external expert keeps its placement and gets no optimizer; the tied head
// has no storage; the frozen matrix has no optimizer.
// ADAMW-LABEL: plan.graph @roles
// ADAMW: plan.policy adamw zero 3 adamw <
// ADAMW: @embed {{.*}} placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw
// ADAMW: @l0.q : {{.*}} placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw
// ADAMW: @l0.ep_expert : {{.*}} placement #plan.external<axes = ["ep"]>{{$}}
// ADAMW: @l1.frozen : {{.*}} frozen placement #plan.row_shard<dim = 0, axes = ["dp_shard"]>{{$}}
// ADAMW: @head : {{.*}} tied_to @embed{{$}}
// ADAMW: plan.unit @u.embed {{.*}} row_layout per_param group 0

// sgd: the same placements with SGD.
// SGD: plan.policy sgd zero 3 sgd <
// SGD: @l0.up : {{.*}} placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.sgd

// muon: every 2-D parameter (embedding and router too) on an owner with
// Muon; 1-D ones row-sharded with AdamW.
// MUON: plan.policy muon zero 3 adamw <{{.*}}> muon <
// MUON: @embed : {{.*}} placement #plan.owner<rank = {{[0-3]}}, axes = ["dp_shard"]> optimizer #plan.muon
// MUON: @l0.q : {{.*}} placement #plan.owner<rank = {{[0-3]}}, axes = ["dp_shard"]> optimizer #plan.muon
// MUON: @l0.q.bias : {{.*}} placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw
// MUON: @l0.norm : {{.*}} placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw
// MUON: @l0.router : {{.*}} placement #plan.owner<rank = {{[0-3]}}, axes = ["dp_shard"]> optimizer #plan.muon
// MUON: @l0.expert : {{.*}} placement #plan.owner<rank = {{[0-3]}}, axes = ["dp_shard"]> optimizer #plan.muon
// MUON: @l0.ep_expert : {{.*}} placement #plan.external<axes = ["ep"]>{{$}}

// mixed_muon_adamw: hidden matrices and managed experts on owners with
// Muon; embedding, router, norms, biases and 1-D tensors with AdamW.
// MIXED: @embed : {{.*}} placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw
// MIXED: @l0.q : {{.*}} placement #plan.owner<rank = {{[0-3]}}, axes = ["dp_shard"]> optimizer #plan.muon
// MIXED: @l0.q.bias : {{.*}} optimizer #plan.adamw
// MIXED: @l0.up : {{.*}} placement #plan.owner<rank = {{[0-3]}}, axes = ["dp_shard"]> optimizer #plan.muon
// MIXED: @l0.router : {{.*}} placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw
// MIXED: @l0.expert : {{.*}} placement #plan.owner<rank = {{[0-3]}}, axes = ["dp_shard"]> optimizer #plan.muon
// MIXED: @l1.frozen : {{.*}} frozen placement #plan.owner<rank = {{[0-3]}}, axes = ["dp_shard"]>{{$}}
// MIXED: @l1.scale : {{.*}} placement #plan.row_shard<dim = 0, axes = ["dp_shard"]> optimizer #plan.adamw

// The knobs move the embedding and the router to Muon.
// KNOBS: @embed : {{.*}} placement #plan.owner<{{.*}}> optimizer #plan.muon
// KNOBS: @l0.router : {{.*}} placement #plan.owner<{{.*}}> optimizer #plan.muon
