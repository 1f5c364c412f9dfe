// RUN: mfsdp-opt %s -split-input-file -verify-diagnostics

// ZeRO levels are 1, 2 and 3.
plan.graph @g {
  // expected-error @+1 {{'plan.policy' op zero must be 1, 2 or 3, got 4}}
  plan.policy adamw zero 4
}

// -----

// Hyperparameters of an optimizer the policy does not use are a mistake.
plan.graph @g {
  // expected-error @+1 {{'plan.policy' op has muon hyperparameters but policy adamw does not use Muon}}
  plan.policy adamw zero 3 muon #plan.muon<lr = 0.02, momentum = 0.95, weight_decay = 0, nesterov = true, ns_steps = 5, scale = original>
}

// -----

// SGD hyperparameters go with the sgd policy.
plan.graph @g {
  // expected-error @+1 {{'plan.policy' op has sgd hyperparameters but policy muon does not use SGD}}
  plan.policy muon zero 3 sgd #plan.sgd<lr = 0.1, momentum = 0.9, weight_decay = 0, nesterov = false>
}

// -----

// AdamW hyperparameters go with a policy that uses AdamW.
plan.graph @g {
  // expected-error @+1 {{'plan.policy' op has adamw hyperparameters but policy sgd does not use AdamW}}
  plan.policy sgd zero 3 adamw #plan.adamw<lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0>
}

// -----

// A graph has at most one policy.
plan.graph @g {
  plan.policy adamw zero 3
  // expected-error @+1 {{'plan.policy' op is the second policy of graph @g; a graph has at most one}}
  plan.policy sgd zero 2
}

// -----

// Unknown policies do not parse.
plan.graph @g {
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'kind' [adamw, sgd, muon, mixed_muon_adamw]}}
  plan.policy lion zero 3
}
