"""mfsdp: sharded training plans compiled ahead of time, for PyTorch.

    import mfsdp.torch
    model, optimizer = mfsdp.torch.fully_shard(model, mesh="dp_shard=2",
                                               policy="mixed_muon_adamw", zero=3)

`mfsdp.torch` installs the hooks that drive a compiled step library (docs/torch.md);
`mfsdp.runtime` is the runtime's C ABI (include/mfsdp/runtime.h) for other trainers.
"""

from ._C import Error  # noqa: F401

__all__ = ["Error"]
__version__ = "0.1.0"
