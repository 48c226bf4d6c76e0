"""switchml as a torch.distributed backend.

    import switchml_torch            # registers the "switchml" backend
    torch.distributed.init_process_group("switchml")   # torchrun's MASTER_ADDR/PORT, RANK, WORLD_SIZE

The switch is found through SWITCHML_SWITCH_ADDRESS (HOST[:PORT], default
127.0.0.1:48800) or a TOML file named by SWITCHML_CONFIG; any Context setting
can be given as SWITCHML_<NAME> (SWITCHML_THREADS, SWITCHML_ELEMENTS_PER_PACKET,
SWITCHML_AUTH_KEY, ...).

Sum all-reduces of CPU float32 (quantized), float16 and bfloat16 (converted
to float32), and int32 (exact) tensors run through the switch, as do
broadcast, allgather and barrier (exact). Everything else runs on an internal
Gloo process group, so every DDP feature keeps working.
"""
import torch
import torch.distributed as dist

from ._C import ProcessGroupSwitchML, __version__

__all__ = ["ProcessGroupSwitchML", "__version__"]


def _create_process_group(store, rank, world_size, timeout):
    fallback = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    return ProcessGroupSwitchML(store, rank, world_size, timeout, fallback)


if "SWITCHML" not in dist.Backend._plugins:
    dist.Backend.register_backend("switchml", _create_process_group)
