// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics

// A mesh needs the dim parameters are sharded over.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op needs a "dp_shard" dim: parameters are sharded over it}}
  plan.mesh @mesh ["dp" = 8]
}

// -----

// Mesh dim names are unique.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op dim "dp_shard" appears twice}}
  plan.mesh @mesh ["dp_shard" = 2, "dp_shard" = 4]
}

// -----

// A dim of size zero is rejected.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op dim "tp" must have size >= 1, got 0}}
  plan.mesh @mesh ["dp_shard" = 2, "tp" = 0]
}

// -----

// An empty mesh is rejected.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op needs at least one dim}}
  plan.mesh @mesh []
}

// -----

// Dim names are non-empty.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op dim names must be non-empty}}
  plan.mesh @mesh ["dp_shard" = 2, "" = 2]
}

// -----

// device_ids has one entry per rank.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op device_ids has 3 entries, expected 4 (the product of the dim sizes)}}
  plan.mesh @mesh ["dp_shard" = 4] device_ids [0, 1, 2]
}

// -----

// device_ids is a permutation: no repeats.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op device id 1 appears twice}}
  plan.mesh @mesh ["dp_shard" = 4] device_ids [0, 1, 1, 3]
}

// -----

// device_ids is a permutation: in range.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op device id 4 is outside [0, 4)}}
  plan.mesh @mesh ["dp_shard" = 4] device_ids [0, 1, 4, 3]
}

// -----

// A mesh of absurd size is rejected rather than overflowing.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op mesh has more than 2^40 ranks}}
  plan.mesh @mesh ["dp_shard" = 1048576, "tp" = 1048576, "ep" = 2]
}

// -----

// A graph has at most one mesh.
plan.graph @g {
  plan.mesh @a ["dp_shard" = 2]
  // expected-error @+1 {{'plan.mesh' op is the second mesh of graph @g; a graph has at most one}}
  plan.mesh @b ["dp_shard" = 4]
}

// -----

// A mesh lives in a graph.
// expected-error @+1 {{'plan.mesh' op expects parent op 'plan.graph'}}
plan.mesh @mesh ["dp_shard" = 2]

// -----

// In the generic form, names and sizes can disagree in length.
plan.graph @g {
  // expected-error @+1 {{'plan.mesh' op has 1 dim names but 2 sizes}}
  "plan.mesh"() <{sym_name = "mesh", dim_names = ["dp_shard"], dim_sizes = array<i64: 2, 4>}> : () -> ()
}
