//===- Hardware.cpp - The hardware profiles of the cost model -------------===//
//
// Every number below is an ASSUMPTION of the cost model, not a measurement:
// peaks are datasheet figures, efficiencies and NCCL figures are typical
// published / nccl-tests-style values we choose to believe. No machine we
// build on has a GPU; predictions made with these numbers are predictions.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/planner/Hardware.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace mfsdp::planner {

namespace {

HardwareProfile a100() {
  HardwareProfile p;
  p.name = "a100";
  p.description = "8x A100-SXM4-80GB, NVLink3 (NVSwitch), HDR InfiniBand "
                  "200 Gb/s per GPU";
  // Datasheet peak, dense bf16 tensor-core FLOP/s (assumption: peak).
  p.gemmFlops = 312e12;
  // Datasheet peak fp32 without tensor cores (TF32 off), FLOP/s.
  p.fp32Flops = 19.5e12;
  // Assumed fraction of peak that large transformer GEMMs reach (~0.75 is a
  // typical cuBLAS figure for large bf16 GEMMs on A100).
  p.gemmEfficiency = 0.75;
  // Assumed, no A100 measured: Newton-Schulz in fp32 reaches the fraction
  // of the fp32 peak it reached on the H100 (h100 below); in bf16 (ours and
  // torch.optim.Muon's) the H100's fraction relative to its GEMM
  // efficiency, times this GPU's: 0.75 x 0.551 / 0.7 and 0.75 x 0.584 / 0.7;
  // its time per kernel the H100's.
  p.nsFp32Efficiency = 0.681;
  p.nsBf16Efficiency = 0.590;
  p.nsFp32KernelSeconds = 10.7e-6;
  p.nsBf16KernelSeconds = 6.3e-6;
  p.nsTorchEfficiency = 0.626;
  // Assumed, no A100 measured: torch.optim.Muon's time per kernel the
  // H100 machine's (h100 below); it is the host's time to launch them.
  p.nsTorchKernelSeconds = 17.9e-6;
  // Assumed fraction of peak the trainer's forward/backward/recomputation
  // reach as a whole (hardware FLOP utilisation, attention and elementwise
  // work included). Published bf16 transformer training on A100 with fused
  // attention reports roughly 45-60%; 0.5 sits in that range. This constant
  // sets the forward/backward predictions; it was fixed knowing the
  // MatrixFSDP seed table (docs/benchmarks.md).
  p.trainerEfficiency = 0.5;
  // Assumed fall-off point: a 1 GFLOP kernel runs at half of gemmEfficiency
  // (eff(1e9) = 0.75 * 1e9 / (1e9 + 1e9) = 0.375), i.e. every kernel pays an
  // extra 1e9 / (312e12 * 0.75) = 4.3 us of latency-bound time.
  p.smallGemmFlops = 1e9;
  // Datasheet HBM2e bandwidth of the 80 GB part, B/s (assumption: peak).
  p.hbmBytes = 2039e9;
  // Datasheet memory: 80 GB (80 GiB of HBM2e; CUDA reports 81,920 MiB).
  p.hbmCapacityBytes = 80.0 * (1 << 30);
  // Link rates the planner prices traffic with: NVLink3 300 GB/s per
  // direction, HDR InfiniBand 200 Gb/s = 25 GB/s.
  p.intraBytes = 300e9;
  p.interBytes = 25e9;
  // Assumed fraction of HBM bandwidth streaming (elementwise) kernels reach.
  p.hbmEfficiency = 0.85;
  // Assumed per-op launch / dispatch overhead, seconds.
  p.launchSeconds = 5e-6;
  // Assumed: eager PyTorch's host time per op as measured on the H100
  // machine's host (h100 below); no A100 host measured.
  p.dispatchSeconds = 11.2e-6;
  // Assumed NCCL bus bandwidth per GPU over NVLink3 / NVSwitch, B/s
  // (nccl-tests-style large-message busbw on DGX A100; link peak 300 GB/s).
  p.intraBusBytes = 230e9;
  // Assumed NCCL bus bandwidth per GPU over one HDR 200 Gb/s NIC
  // (25 GB/s line rate, ~90% achieved).
  p.interBusBytes = 22e9;
  // Assumed latency of one ring step inside a node (NVLink), seconds.
  p.intraHopSeconds = 2e-6;
  // Assumed latency of one ring step across InfiniBand, seconds.
  p.interHopSeconds = 5e-6;
  // Assumed fixed cost of launching any NCCL collective, seconds.
  p.collBaseSeconds = 10e-6;
  // Assumed: PyTorch's caching allocator reserves per allocated byte at the
  // peak what it did on the H100 (h100 below); the allocator is the same
  // software on either GPU, no A100 run measured.
  p.allocatorReserve = 1.058;
  // GPUs per node sharing NVLink (DGX / HGX A100).
  p.gpusPerNode = 8;
  // Assumed: the H100's measured attention rates (h100 below) scaled by the
  // ratio of dense bf16 peaks, 312 / 989; no A100 measurement here.
  p.attention = {{64, 448e12 * 312 / 989, 354, 455e12 * 312 / 989, 1274},
                 {128, 642e12 * 312 / 989, 539, 585e12 * 312 / 989, 1520}};
  return p;
}

HardwareProfile h100() {
  HardwareProfile p;
  p.name = "h100";
  p.description = "8x H100-SXM, NVLink4 (NVSwitch), NDR InfiniBand 400 Gb/s "
                  "per GPU";
  // Datasheet peak, dense bf16 tensor-core FLOP/s (assumption: peak).
  p.gemmFlops = 989e12;
  // Datasheet peak fp32 without tensor cores (TF32 off), SXM: 67 TFLOP/s.
  p.fp32Flops = 67e12;
  // Newton-Schulz (5 iterations, the CUDA backend's symmetric form, counted
  // with the compiler's FLOPs 3 s^2 l + s^3 per iteration and the kernels
  // it launches, rt::newtonSchulzKernels), measured on one H100 80GB HBM3
  // on 2026-11-27 (docs/benchmarks.md, "CUDA optimizer kernels against
  // PyTorch's"). Time = kernels x per-kernel seconds + FLOPs / rate, both
  // fitted per precision on two square matrices: 4096x4096 (31.27 ms fp32,
  // 2.956 ms bf16; 109 and 69 kernels) and 1024x1024 (0.996 ms, 0.348 ms;
  // 49 kernels): fp32 45.7 TFLOP/s (0.681 of 67) and 10.7 us a kernel,
  // bf16 545 TFLOP/s (0.551 of 989) and 6.3 us. The 4096x14336 shapes
  // measured in the same run are the check ("Newton-Schulz priced by
  // precision" there).
  p.nsFp32Efficiency = 0.681;
  p.nsBf16Efficiency = 0.551;
  p.nsFp32KernelSeconds = 10.7e-6;
  p.nsBf16KernelSeconds = 6.3e-6;
  // torch.optim.Muon's own Newton-Schulz (PyTorch 2.11, bf16, three GEMMs
  // an iteration) on the same GPU in the same run, fitted on 4096x4096:
  // 3.567 ms for 2.06e12 FLOPs, 578 TFLOP/s, 0.584 of 989.
  p.nsTorchEfficiency = 0.584;
  // Its time per kernel, fitted on 1024x1024 in the same run: 0.519 ms for
  // its 29 kernels (planner::torchNewtonSchulzKernels), where its FLOPs at
  // the rate above take 0.056 ms: the host's launches set the time.
  p.nsTorchKernelSeconds = 17.9e-6;
  // Assumed fraction of peak large bf16 GEMMs reach on H100 (~0.7; H100
  // sits further from its peak than A100). Checked against one H100 80GB
  // HBM3 (docs/benchmarks.md, "Per-op rates on the same H100"): bf16 GEMMs
  // of 4096 or more rows and N, K >= 4096 ran at 586-752 TFLOP/s, 0.59-0.76
  // of peak; a fit over 96 shapes gives 715 (0.72).
  p.gemmEfficiency = 0.7;
  // Assumed trainer utilisation on H100 (reported bf16 training HFU runs
  // lower than on A100, roughly 35-50%).
  p.trainerEfficiency = 0.42;
  // Assumed fall-off point: a 1 GFLOP kernel runs at half of gemmEfficiency
  // (0.35 of peak); every kernel pays 1e9 / (989e12 * 0.7) = 1.4 us extra.
  p.smallGemmFlops = 1e9;
  // Datasheet HBM3 bandwidth, B/s (assumption: peak).
  p.hbmBytes = 3350e9;
  // Datasheet memory: 80 GB of HBM3 (81,559 MiB usable as CUDA reports it;
  // 80 GiB is the cap the model keeps).
  p.hbmCapacityBytes = 80.0 * (1 << 30);
  // Link rates the planner prices traffic with: NVLink4 450 GB/s per
  // direction, NDR InfiniBand 400 Gb/s = 50 GB/s.
  p.intraBytes = 450e9;
  p.interBytes = 50e9;
  // Assumed fraction of HBM bandwidth streaming kernels reach. Measured on
  // one H100 80GB HBM3: a device-to-device copy and a bf16 add moved 2.98
  // TB/s (0.89 of the datasheet's 3.35).
  p.hbmEfficiency = 0.85;
  // Assumed per-op launch / dispatch overhead, seconds (kernel launch; eager
  // PyTorch's dispatch measured 11.2 us per op back to back on one H100).
  p.launchSeconds = 5e-6;
  // Eager PyTorch's host time per op, measured on the H100 machine's host
  // (an Intel Xeon, PyTorch 2.11: a one-element kernel back to back, docs/
  // benchmarks.md "Per-op rates on the same H100"); a property of the host
  // and the framework more than of the GPU.
  p.dispatchSeconds = 11.2e-6;
  // Assumed NCCL bus bandwidth per GPU over NVLink4 / NVSwitch, B/s
  // (nccl-tests-style busbw on HGX H100; link peak 450 GB/s per direction).
  p.intraBusBytes = 360e9;
  // Assumed NCCL bus bandwidth per GPU over one NDR 400 Gb/s NIC
  // (50 GB/s line rate, ~90% achieved).
  p.interBusBytes = 45e9;
  // Assumed latency of one ring step inside a node (NVLink), seconds.
  p.intraHopSeconds = 2e-6;
  // Assumed latency of one ring step across InfiniBand, seconds.
  p.interHopSeconds = 5e-6;
  // Assumed fixed cost of launching any NCCL collective, seconds.
  p.collBaseSeconds = 10e-6;
  // Fitted: peak reserved over peak allocated of PyTorch 2.11's caching
  // allocator in the 15 training steps measured on one H100 on 2026-11-26
  // (docs/data/h100-steps-2026-11-26.json; 1.006-1.122, mean 1.058;
  // leave one out, at most 6.1% off: docs/benchmarks.md, "The caching
  // allocator's reserve").
  p.allocatorReserve = 1.058;
  // GPUs per node sharing NVLink (HGX H100).
  p.gpusPerNode = 8;
  // Causal flash attention (PyTorch's scaled_dot_product_attention, bf16),
  // measured on one H100 80GB HBM3 on 2026-11-26 at sequences 256-16384
  // and fitted as rate * s / (s + seq0) (docs/benchmarks.md, "Per-op rates
  // on the same H100"; scripts/fit-calibration.py on
  // docs/data/h100-calibrate-2026-11-26.json): mean errors 1.2-6.5%.
  p.attention = {{64, 448e12, 354, 455e12, 1274}, {128, 642e12, 539, 585e12, 1520}};
  return p;
}

HardwareProfile h100ib() {
  // The same H100 nodes and rates, but the data-parallel group is laid out
  // one rank per node (tensor / expert parallelism fills each node), so every
  // data-parallel collective of two or more ranks runs over InfiniBand at
  // interBusBytes with interHopSeconds per ring step.
  HardwareProfile p = h100();
  p.name = "h100-ib";
  p.description = "H100-SXM nodes, data-parallel ranks one per node over NDR "
                  "InfiniBand 400 Gb/s per GPU";
  // Assumption of this profile: one data-parallel rank per node.
  p.gpusPerNode = 1;
  return p;
}

HardwareProfile a100pcie() {
  // The A100 in its PCIe form, GPUs joined by PCIe only (no NVLink bridge):
  // the servers where data-parallel collectives run at PCIe rates.
  HardwareProfile p = a100();
  p.name = "a100-pcie";
  p.description = "8x A100-PCIe-80GB, PCIe Gen4 x16 (no NVLink), HDR "
                  "InfiniBand 200 Gb/s per GPU";
  // NVIDIA A100 datasheet (PCIe 80GB): 312 TFLOP/s dense bf16 (the same
  // tensor cores), 19.5 TFLOP/s fp32, 1,935 GB/s HBM2e (the SXM part has
  // 2,039).
  p.gemmFlops = 312e12;
  p.fp32Flops = 19.5e12;
  p.hbmBytes = 1935e9;
  // Assumed: the 300 W PCIe part holds its clocks less under sustained
  // GEMMs than the 400 W SXM part.
  p.gemmEfficiency = 0.7;
  // Newton-Schulz in bf16 by the a100 rule with this GEMM efficiency:
  // 0.7 x 0.551 / 0.7 and 0.7 x 0.584 / 0.7.
  p.nsBf16Efficiency = 0.551;
  p.nsTorchEfficiency = 0.584;
  p.trainerEfficiency = 0.45;
  // PCIe Gen4 x16: 32 GB/s per direction (64 GB/s both ways, datasheet).
  p.intraBytes = 32e9;
  // Assumed NCCL bus bandwidth per GPU over PCIe Gen4 without NVLink: rings
  // cross the CPU root complex (no peer-to-peer between sockets), about
  // 40% of the link's 32 GB/s.
  p.intraBusBytes = 12e9;
  // Assumed latency of one ring step over PCIe (through host bridges).
  p.intraHopSeconds = 8e-6;
  return p;
}

HardwareProfile h100pcie() {
  // The H100 in its PCIe form, GPUs joined by PCIe only.
  HardwareProfile p = h100();
  p.name = "h100-pcie";
  p.description = "8x H100-PCIe-80GB, PCIe Gen5 x16 (no NVLink), NDR "
                  "InfiniBand 400 Gb/s per GPU";
  // NVIDIA H100 datasheet (PCIe): 1,513 TFLOP/s bf16 with sparsity, so 756
  // dense; 51 TFLOP/s fp32; 2.0 TB/s HBM2e.
  p.gemmFlops = 756e12;
  p.fp32Flops = 51e12;
  p.hbmBytes = 2000e9;
  // Assumed: the SXM part's attention rates scaled by the peak ratio.
  for (AttentionRate &r : p.attention) {
    r.fwdRate *= 756.0 / 989;
    r.fwdBwdRate *= 756.0 / 989;
  }
  // PCIe Gen5 x16: 64 GB/s per direction (128 GB/s both ways, datasheet).
  p.intraBytes = 64e9;
  // Assumed, as for a100-pcie: about 40% of the link for NCCL rings that
  // cross the CPU root complex.
  p.intraBusBytes = 24e9;
  p.intraHopSeconds = 8e-6;
  return p;
}

} // namespace

const std::vector<HardwareProfile> &hardwareProfiles() {
  static const std::vector<HardwareProfile> profiles = {
      a100(), h100(), h100ib(), a100pcie(), h100pcie()};
  return profiles;
}

const HardwareProfile *findHardwareProfile(std::string_view name) {
  for (const auto &p : hardwareProfiles())
    if (p.name == name)
      return &p;
  return nullptr;
}

std::string hardwareProfileNames() {
  const auto &profiles = hardwareProfiles();
  std::string out;
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (i)
      out += i + 1 == profiles.size() ? " or " : ", ";
    out += profiles[i].name;
  }
  return out;
}

std::string unknownHardwareMessage(std::string_view name) {
  return "unknown hardware profile '" + std::string(name) + "'; expected " +
         hardwareProfileNames();
}

double nsPeakFlops(const HardwareProfile &p) {
  return p.nsBf16 ? p.gemmFlops : p.fp32Flops;
}

double nsFlopsRate(const HardwareProfile &p) {
  return nsPeakFlops(p) * (p.nsBf16 ? p.nsBf16Efficiency : p.nsFp32Efficiency);
}

double nsKernelSeconds(const HardwareProfile &p) {
  return p.nsBf16 ? p.nsBf16KernelSeconds : p.nsFp32KernelSeconds;
}

bool applyProfileOverrides(HardwareProfile &p, std::string_view spec, std::string &error) {
  struct Field {
    const char *name;
    double *value;
  } fields[] = {{"gemmFlops", &p.gemmFlops},
                {"fp32Flops", &p.fp32Flops},
                {"gemmEfficiency", &p.gemmEfficiency},
                {"nsFp32Efficiency", &p.nsFp32Efficiency},
                {"nsBf16Efficiency", &p.nsBf16Efficiency},
                {"nsFp32KernelSeconds", &p.nsFp32KernelSeconds},
                {"nsBf16KernelSeconds", &p.nsBf16KernelSeconds},
                {"nsTorchEfficiency", &p.nsTorchEfficiency},
                {"nsTorchKernelSeconds", &p.nsTorchKernelSeconds},
                {"trainerEfficiency", &p.trainerEfficiency},
                {"smallGemmFlops", &p.smallGemmFlops},
                {"hbmBytes", &p.hbmBytes},
                {"hbmEfficiency", &p.hbmEfficiency},
                {"launchSeconds", &p.launchSeconds},
                {"dispatchSeconds", &p.dispatchSeconds},
                {"intraBusBytes", &p.intraBusBytes},
                {"interBusBytes", &p.interBusBytes},
                {"intraHopSeconds", &p.intraHopSeconds},
                {"interHopSeconds", &p.interHopSeconds},
                {"collBaseSeconds", &p.collBaseSeconds},
                {"allocatorReserve", &p.allocatorReserve}};
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      error = "profile override '" + std::string(item) + "': expected key=value";
      return false;
    }
    const std::string key(item.substr(0, eq)), text(item.substr(eq + 1));
    char *end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) {
      error = "profile override '" + key + "': '" + text + "' is not a finite number";
      return false;
    }
    if (key == "attentionScale" || key == "computeScale") {
      for (AttentionRate &r : p.attention) {
        r.fwdRate *= v;
        r.fwdBwdRate *= v;
      }
      if (key == "computeScale") {
        // Every compute rate, efficiencies held at most 1.
        p.gemmEfficiency = std::min(1.0, p.gemmEfficiency * v);
        p.trainerEfficiency = std::min(1.0, p.trainerEfficiency * v);
        p.hbmEfficiency = std::min(1.0, p.hbmEfficiency * v);
        p.nsFp32Efficiency = std::min(1.0, p.nsFp32Efficiency * v);
        p.nsBf16Efficiency = std::min(1.0, p.nsBf16Efficiency * v);
        p.nsTorchEfficiency = std::min(1.0, p.nsTorchEfficiency * v);
      }
      continue;
    }
    if (key == "commScale") {
      p.intraBusBytes *= v;
      p.interBusBytes *= v;
      continue;
    }
    bool found = false;
    for (Field &f : fields)
      if (key == f.name) {
        *f.value = v;
        found = true;
      }
    if (!found) {
      std::string names;
      for (const Field &f : fields)
        names += std::string(f.name) + ", ";
      error = "profile override: unknown key '" + key + "'; expected one of " + names +
              "attentionScale, computeScale, commScale";
      return false;
    }
  }
  return true;
}

} // namespace mfsdp::planner
