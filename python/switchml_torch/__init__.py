"""switchml as a torch.distributed backend.

    import switchml_torch            # registers the "switchml" backend
    torch.distributed.init_process_group("switchml")   # torchrun's MASTER_ADDR/PORT, RANK, WORLD_SIZE

The switch is found through SWITCHML_SWITCH_ADDRESS (HOST[:PORT], default
127.0.0.1:48800) or a TOML file named by SWITCHML_CONFIG; any Context setting
can be given as SWITCHML_<NAME> (SWITCHML_THREADS, SWITCHML_ELEMENTS_PER_PACKET,
SWITCHML_AUTH_KEY, ...).

Sum and average (ReduceOp.AVG) all-reduces and reduce-scatters of CPU
float32 (quantized), float16 and bfloat16 (converted to float32), and int32
(exact; sums only) tensors run through the switch, as do broadcast, allgather
and barrier (exact). Everything else runs on an internal Gloo process group,
with a warning once per operation, dtype and device, so every DDP feature
keeps working.

    switchml_torch.settings()   # the settings in effect (a dict, as in the TOML file)
    switchml_torch.counters()   # this rank's protocol counters
    switchml_torch.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=True)

The group's timeout (init_process_group(timeout=...), 30 minutes by default)
is how long an operation waits for a late rank; it then fails on every rank
with "Timed out", naming the missing ranks.
"""
import tomllib

import torch
import torch.distributed as dist

from ._C import ProcessGroupSwitchML, __version__

__all__ = ["ProcessGroupSwitchML", "__version__", "settings", "counters", "monitored_barrier"]


def _switchml_group(group):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupSwitchML):
        raise ValueError("not a switchml process group: " + type(pg).__name__ +
                         " (init_process_group(\"switchml\"), or pass the group)")
    return pg


def settings(group=None):
    """The switchml settings of `group` (default: the default group) in effect."""
    return tomllib.loads(_switchml_group(group).settings_toml())


def counters(group=None):
    """This rank's protocol counters in `group` (default: the default group)."""
    return dict(_switchml_group(group).counters())


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier for a switchml group, which torch
    1.13's refuses for every backend but Gloo: the group's internal Gloo group
    runs it, and a rank that does not arrive within `timeout` (default: torch's
    default group timeout) is named in the error."""
    if timeout is None:
        timeout = dist.default_pg_timeout
    _switchml_group(group).monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


def _create_process_group(store, rank, world_size, timeout):
    fallback = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    return ProcessGroupSwitchML(store, rank, world_size, timeout, fallback)


if "SWITCHML" not in dist.Backend._plugins:
    dist.Backend.register_backend("switchml", _create_process_group)
