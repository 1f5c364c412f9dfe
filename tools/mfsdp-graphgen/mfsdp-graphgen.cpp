//===- mfsdp-graphgen.cpp - Write model graphs from a few sizes -----------===//
//
//   mfsdp-graphgen --arch llama --layers 32 --hidden 4096 --heads 32 \
//       --kv-heads 8 --intermediate 14336 --vocab 128256 -o llama.json
//
// Writes a graph in format 1 (docs/graph-format.md) so model sizes can be
// swept without a config.json. `--print-config` writes the config.json the
// generator imports instead (HF architectures only).
//
//===----------------------------------------------------------------------===//
#include "mfsdp/graph/Generate.h"
#include "mfsdp/graph/HFConfig.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

using namespace mfsdp::graph;

static void usage(std::ostream &os) {
  os << "usage: mfsdp-graphgen [options] [-o out.json]\n"
        "  --arch NAME          llama, mistral, qwen2, qwen3, qwen3_moe, "
        "mixtral,\n"
        "                       deepseek_v3, or gpt_bench (default llama)\n"
        "  --layers N           decoder layers (default 2)\n"
        "  --hidden N           hidden size (default 64)\n"
        "  --heads N            attention heads (default 4)\n"
        "  --kv-heads N         key/value heads (default: = heads)\n"
        "  --intermediate N     MLP intermediate size (default 128)\n"
        "  --vocab N            vocabulary (default 256; 0 for gpt_bench: no "
        "embedding/head)\n"
        "  --experts N          routed experts (MoE archs)\n"
        "  --top-k N            experts per token (default 2)\n"
        "  --moe-intermediate N expert intermediate size (default: "
        "intermediate)\n"
        "  --shared-experts N   shared experts (deepseek_v3)\n"
        "  --dense-layers N     leading dense layers (qwen3_moe, deepseek_v3)\n"
        "  --tie                tie the output head to the embedding\n"
        "  --experts-owned-by D mark routed experts external, owned by dim D\n"
        "  --dtype T            parameter dtype (default bf16)\n"
        "  --name NAME          model name\n"
        "  --seq-len N          sequence length of the cost estimates "
        "(default 4096)\n"
        "  --recompute          units use activation checkpointing\n"
        "  --transformers N     HF archs: names of transformers N, 5 (fused "
        "experts\n"
        "                       as their matrices; default) or 4\n"
        "  --mesh SPEC          default mesh, e.g. dp_replicate=2,dp_shard=4,ep=2\n"
        "  --policy NAME        default policy: adamw, sgd, muon, "
        "mixed_muon_adamw\n"
        "  --zero N             ZeRO level of the default policy (default 3)\n"
        "  --print-config       write the generated config.json instead\n"
        "  -o FILE              output file (default stdout)\n";
}

static bool parseInt(const char *flag, const char *text, int64_t &out) {
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (errno || !end || *end || end == text) {
    std::cerr << "mfsdp-graphgen: error: " << flag
              << " expects an integer, got '" << text << "'\n";
    return false;
  }
  out = v;
  return true;
}

int main(int argc, char **argv) {
  GenSpec spec;
  std::string output = "-";
  bool printConfig = false;
  std::string meshSpec, policyName;
  int64_t zero = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::cerr << "mfsdp-graphgen: error: " << a << " needs a value\n";
        std::exit(1);
      }
      return argv[++i];
    };
    struct IntFlag {
      const char *name;
      int64_t *dst;
    } ints[] = {{"--layers", &spec.layers},
                {"--hidden", &spec.hidden},
                {"--heads", &spec.heads},
                {"--kv-heads", &spec.kvHeads},
                {"--intermediate", &spec.intermediate},
                {"--vocab", &spec.vocab},
                {"--experts", &spec.experts},
                {"--top-k", &spec.topK},
                {"--moe-intermediate", &spec.moeIntermediate},
                {"--shared-experts", &spec.sharedExperts},
                {"--dense-layers", &spec.denseLayers},
                {"--seq-len", &spec.seqLen},
                {"--transformers", &spec.transformers},
                {"--zero", &zero}};
    bool matched = false;
    for (auto &f : ints)
      if (a == f.name) {
        if (!parseInt(f.name, value(), *f.dst))
          return 1;
        matched = true;
      }
    if (matched)
      continue;
    if (a == "--arch")
      spec.arch = value();
    else if (a == "--tie")
      spec.tie = true;
    else if (a == "--experts-owned-by")
      spec.expertsOwnedBy = value();
    else if (a == "--dtype")
      spec.dtype = value();
    else if (a == "--name")
      spec.name = value();
    else if (a == "--recompute")
      spec.recompute = true;
    else if (a == "--mesh")
      meshSpec = value();
    else if (a == "--policy")
      policyName = value();
    else if (a == "--print-config")
      printConfig = true;
    else if (a == "-o")
      output = value();
    else if (a == "-h" || a == "--help") {
      usage(std::cout);
      return 0;
    } else {
      std::cerr << "mfsdp-graphgen: error: unknown option '" << a << "'\n";
      usage(std::cerr);
      return 1;
    }
  }

  if (zero < 1 || zero > 3) {
    std::cerr << "mfsdp-graphgen: error: --zero expects 1, 2 or 3, got " << zero
              << "\n";
    return 1;
  }
  std::string text;
  Graph g;
  Diagnostic diag;
  if (!generateGraph(spec, g, diag)) {
    std::cerr << "mfsdp-graphgen: error: " << diag.pointer << ": "
              << diag.message << "\n";
    return 1;
  }
  if (!meshSpec.empty()) {
    Mesh mesh;
    size_t start = 0;
    while (start <= meshSpec.size()) {
      size_t end = meshSpec.find(',', start);
      if (end == std::string::npos)
        end = meshSpec.size();
      std::string item = meshSpec.substr(start, end - start);
      size_t eq = item.find('=');
      MeshDim dim;
      if (eq == std::string::npos || eq == 0 ||
          !parseInt("--mesh", item.c_str() + eq + 1, dim.size)) {
        std::cerr << "mfsdp-graphgen: error: --mesh expects NAME=SIZE[,...], "
                     "got '"
                  << item << "'\n";
        return 1;
      }
      dim.name = item.substr(0, eq);
      mesh.dims.push_back(dim);
      start = end + 1;
    }
    g.mesh = mesh;
  }
  if (!policyName.empty()) {
    auto kind = mfsdp::parseEnum<mfsdp::PolicyKind>(policyName);
    if (!kind) {
      std::cerr << "mfsdp-graphgen: error: "
                << mfsdp::unknownEnumMessage<mfsdp::PolicyKind>(policyName)
                << "\n";
      return 1;
    }
    Policy policy;
    policy.kind = *kind;
    policy.zero = zero;
    g.policy = policy;
  }
  if ((g.mesh || g.policy) && !validate(g, diag)) {
    std::cerr << "mfsdp-graphgen: error: " << diag.pointer << ": "
              << diag.message << "\n";
    return 1;
  }
  if (printConfig) {
    text = generatedHFConfig(spec);
    if (text.empty()) {
      std::cerr << "mfsdp-graphgen: error: --print-config needs a Hugging "
                   "Face architecture, not '"
                << spec.arch << "'\n";
      return 1;
    }
  } else {
    text = writeGraph(g);
  }
  if (output == "-") {
    std::cout << text;
    return 0;
  }
  std::ofstream out(output);
  out << text;
  out.close();
  if (!out) {
    std::cerr << "mfsdp-graphgen: error: cannot write '" << output
              << "': " << std::strerror(errno) << "\n";
    return 1;
  }
  return 0;
}
