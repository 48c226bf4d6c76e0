#!/usr/bin/env python3
"""PyTorch's own distributed tests, run against the switchml backend.

torch.testing._internal.distributed.distributed_test (DistributedTest._DistTestBase)
is the suite PyTorch runs against its own backends (upstream's
test/distributed/test_distributed_spawn.py). This runs it against "switchml",
with a real switch on loopback:

    torch_distributed_suite.py --world-size 2                 # the whole suite
    torch_distributed_suite.py --world-size 4 --collectives   # the collectives
    torch_distributed_suite.py --list                         # expected failures, and why

It exits non-zero when a test fails that is not listed below as expected to
fail, and when one listed there passes (then the list is out of date).

How, and why so:
- The suite's skip decorators are evaluated as for Gloo (BACKEND=gloo while
  the suite is imported): what upstream runs against Gloo, the CPU backend,
  runs against switchml too. The tests themselves then run with
  BACKEND=switchml.
- Ranks are forked, not spawned (as upstream's test_distributed_fork.py did
  for CPU backends): a spawned rank spends two seconds importing torch.
- DDP with ReplicatedTensor, which the suite switches on, stays off, as users
  have it: on torch 1.13 with Python 3.11 it makes every DDP constructor fail
  importing torch.distributed._shard, for Gloo as well.
- torch's test utilities import `expecttest`, which Debian does not ship;
  torch_stubs/expecttest.py stands in.

Run with Debian's python3 and PYTHONPATH holding the build's python/
directory; SWITCHML_BIN names the build (CTest sets both).
"""
import argparse
import atexit
import os
import re
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "torch_stubs"))

# Read by the suite when it is imported (see above).
os.environ["BACKEND"] = "gloo"
os.environ.setdefault("WORLD_SIZE", "2")
_init_dir = tempfile.mkdtemp(prefix="switchml-torch-suite-")
# torch's test cases leave a temporary file each (MultiProcessTestCase's
# file_name): they go here, removed with it when the suite's process ends
# (not when a forked rank does).
tempfile.tempdir = _init_dir
_suite_pid = os.getpid()


@atexit.register
def _remove_init_dir():
    if os.getpid() == _suite_pid:
        shutil.rmtree(_init_dir, ignore_errors=True)


os.environ["TEMP_DIR"] = _init_dir
os.environ["INIT_METHOD"] = "file://" + os.path.join(_init_dir, "shared_init_file")

import torch  # noqa: E402
import torch.multiprocessing  # noqa: E402
import torch.nn.parallel._replicated_tensor_ddp_utils as replicated_tensor  # noqa: E402
from torch.testing._internal.distributed import distributed_test  # noqa: E402

import switchml_torch  # noqa: E402,F401  (registers the backend)
from torch_test_util import Switch  # noqa: E402

distributed_test.BACKEND = "switchml"
replicated_tensor._set_ddp_with_replicated_tensor = lambda enabled: None

TORCH = torch.__version__

# What --collectives selects: the collectives the switch serves or that
# delegate to the internal Gloo group, and DDP.
COLLECTIVES = re.compile(r"all_reduce|broadcast|all_gather|_reduce_|reduce_scatter|"
                         r"reduce_sum|reduce_max|reduce_min|reduce_product|barrier|"
                         r"DistributedDataParallel|all_to_all|scatter|gather")

# Tests that fail against switchml, each with whose cause it is ("torch": the
# test itself, "switchml": ours) and why. A test that starts passing fails
# the run, so this list stays true.
_ACCUMULATE = ("torch", "the test builds its model only for BACKEND gloo, mpi or nccl, and "
               "fails with UnboundLocalError on `ddp_model` for any other backend")
_MONITORED = ("torch", "torch.distributed.monitored_barrier refuses every backend but Gloo in "
              "Python (\"only implemented for GLOO backend\") before the call reaches the "
              "process group; switchml_torch.monitored_barrier() runs it on the internal Gloo "
              "group")
EXPECTED_FAILURES = {
    "test_accumulate_gradients_no_sync": _ACCUMULATE,
    "test_accumulate_gradients_no_sync_allreduce_hook": _ACCUMULATE,
    "test_accumulate_gradients_no_sync_allreduce_with_then_hook": _ACCUMULATE,
    "test_accumulate_gradients_no_sync_grad_is_view": _ACCUMULATE,
    "test_monitored_barrier_gloo": _MONITORED,
    "test_monitored_barrier_gloo_subgroup": _MONITORED,
    "test_monitored_barrier_failure_order": _MONITORED,  # world size 3 and up
    "test_monitored_barrier_wait_all_ranks": _MONITORED,  # world size 3 and up
}


class TestSwitchML(distributed_test.TestDistBackend, distributed_test.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)


for _name, (_cause, _why) in EXPECTED_FAILURES.items():
    setattr(TestSwitchML, _name, unittest.expectedFailure(getattr(TestSwitchML, _name)))


def selected(collectives):
    names = sorted(n for n in dir(TestSwitchML) if n.startswith("test_"))
    return [n for n in names if not collectives or COLLECTIVES.search(n)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--collectives", action="store_true",
                        help="only the collectives and DDP")
    parser.add_argument("--list", action="store_true",
                        help="print the expected failures with their causes, then exit")
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="only tests whose name contains this (repeatable)")
    args = parser.parse_args()
    if args.list:
        for name, (cause, why) in sorted(EXPECTED_FAILURES.items()):
            print(f"{name}: expected to fail, cause: {cause}: {why}")
        return 0
    os.environ["WORLD_SIZE"] = str(args.world_size)
    names = [n for n in selected(args.collectives)
             if not args.patterns or any(p in n for p in args.patterns)]
    suite = unittest.TestSuite(TestSwitchML(n) for n in names)
    with Switch() as switch:
        os.environ["SWITCHML_SWITCH_ADDRESS"] = switch.address
        result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    ran = result.testsRun - len(result.skipped)
    failed = len(result.failures) + len(result.errors)
    expected, unexpected = len(result.expectedFailures), len(result.unexpectedSuccesses)
    print(f"torch {TORCH}, world size {args.world_size}: {len(names)} tests, {ran} run: "
          f"{ran - failed - expected - unexpected} passed, {expected} failed as expected, "
          f"{failed} failed, {unexpected} passed unexpectedly; {len(result.skipped)} skipped "
          f"by the suite")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
