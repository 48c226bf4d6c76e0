"""The "switchml" torch.distributed backend, with real processes and a real switch.

Run with Debian's python3 (where python3-torch lives) and PYTHONPATH set to
the build's python/ directory; CTest does both.
"""
import multiprocessing
import os
import sys
import tempfile
import time
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
from torch_test_util import Switch, free_port  # noqa: E402

SHAPES = [(), (1,), (7,), (3, 5), (1000,), (257, 3), (2, 3, 4, 5)]
DTYPES = [torch.float32, torch.int32, torch.float16, torch.bfloat16]


def init(rank, world, port, backend="switchml", timeout=timedelta(minutes=30)):
    import switchml_torch  # noqa: F401  (registers the backend)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)


def value(shape, dtype, rank):
    g = torch.Generator().manual_seed(1000 + rank)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, generator=g, dtype=torch.int32)
    return (torch.randn(shape, generator=g) * (rank + 1)).to(dtype)


def allreduce_worker(rank, world, port):
    init(rank, world, port)
    gloo = dist.new_group(backend="gloo")
    for shape in SHAPES:
        for dtype in DTYPES:
            x = value(shape, dtype, rank)
            # Gloo cannot sum bfloat16; the reference for 16-bit types is
            # Gloo's float32 sum of the same values.
            ours = x.clone()
            theirs = x.clone() if dtype in (torch.float32, torch.int32) else x.float()
            dist.all_reduce(ours)
            dist.all_reduce(theirs, group=gloo)
            what = f"shape {shape} dtype {dtype}"
            if dtype == torch.int32:
                assert torch.equal(ours, theirs), what
            elif dtype == torch.float32:
                # Quantization: n/(2f) with f about 2^31/(n 2^e), i.e. about
                # n^2 2^-32 |x|max; Gloo's float32 additions: about n 2^-24 of
                # the magnitude. Both well inside 2^-20 of n |x|max.
                scale = max(1.0, float(x.abs().max())) * world
                torch.testing.assert_close(ours, theirs, rtol=0, atol=scale * 2.0**-20, msg=what)
            else:  # summed in float32, then one rounding to the 16-bit type: at most
                # one unit in the last place apart (2^-7 for bfloat16, 2^-10 for float16)
                ulp = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
                scale = max(1.0, float(x.float().abs().max())) * world
                torch.testing.assert_close(ours.float(), theirs, rtol=ulp,
                                           atol=scale * 2.0**-20, msg=what)
    # Non-contiguous tensors, other reductions and collectives.
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (rank + 1)
    expected = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * sum(range(1, world + 1))
    dist.all_reduce(t)
    torch.testing.assert_close(t, expected)
    m = torch.tensor([float(rank)])
    dist.all_reduce(m, op=dist.ReduceOp.MAX)  # Gloo fallback
    assert m.item() == world - 1
    b = torch.full((5,), float(rank), dtype=torch.float64)
    dist.broadcast(b, src=world - 1)
    assert torch.equal(b, torch.full((5,), float(world - 1), dtype=torch.float64))
    out = [torch.zeros(3, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(out, torch.tensor([rank, rank * 7, -rank]))
    assert all(torch.equal(out[r], torch.tensor([r, r * 7, -r])) for r in range(world))
    dist.barrier()
    dist.destroy_process_group()


def parity_worker(rank, world, port):
    """ReduceOp.AVG, reduce_scatter in both forms, the warning on a fallback,
    and the settings and counters from Python."""
    import warnings
    import switchml_torch
    init(rank, world, port)
    x = torch.arange(10, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    mean = torch.arange(10, dtype=torch.float32) * sum(range(1, world + 1)) / world
    torch.testing.assert_close(x, mean, rtol=0, atol=2.0**-16)
    h = (torch.arange(6, dtype=torch.float32) * (rank + 1)).half()
    dist.all_reduce(h, op=dist.ReduceOp.AVG)
    torch.testing.assert_close(h.float(), torch.arange(6, dtype=torch.float32) *
                               sum(range(1, world + 1)) / world, rtol=2.0**-10, atol=2.0**-10)
    # reduce_scatter: rank r gets the sum over ranks of their r-th input.
    inputs = [torch.full((2, 3), float(10 * r + rank), dtype=torch.float32) for r in range(world)]
    out = torch.zeros(2, 3)
    dist.reduce_scatter(out, inputs)
    torch.testing.assert_close(out, torch.full((2, 3), float(10 * rank * world + sum(range(world)))),
                               rtol=0, atol=2.0**-16)
    ints = [torch.full((4,), 100 * r + rank, dtype=torch.int32) for r in range(world)]
    out_i = torch.zeros(4, dtype=torch.int32)
    dist.reduce_scatter(out_i, ints)
    assert torch.equal(out_i, torch.full((4,), 100 * rank * world + sum(range(world)),
                                         dtype=torch.int32)), out_i
    flat = torch.arange(world * 5, dtype=torch.int32) + rank
    before = flat.clone()
    base_out = torch.zeros(5, dtype=torch.int32)
    dist.reduce_scatter_tensor(base_out, flat)
    assert torch.equal(flat, before), "the input was changed"
    want = (torch.arange(world * 5, dtype=torch.int32) * world + sum(range(world)))[rank * 5:rank * 5 + 5]
    assert torch.equal(base_out, want), base_out
    # What the switch does not serve warns once, naming why (c10's warning
    # goes to stderr, or to Python's warnings where torch routes it there).
    with warnings.catch_warnings(record=True) as caught, tempfile.TemporaryFile("w+") as err:
        warnings.simplefilter("always")
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            for _ in range(3):
                m = torch.tensor([float(rank)], dtype=torch.int32)
                dist.all_reduce(m, op=dist.ReduceOp.MAX)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        text = err.read() + "".join(str(w.message) for w in caught)
    assert text.count("runs on the internal Gloo group") == 1, text
    assert "the switch sums (SUM, and AVG of floating types) only" in text, text
    assert m.item() == world - 1
    s = switchml_torch.settings()
    assert s["world_size"] == world and s["rank"] == rank and s["elements_per_packet"] > 0, s
    c = switchml_torch.counters()
    assert c["packets_sent"] > 0 and c["results_accepted"] > 0, c
    switchml_torch.monitored_barrier(timeout=timedelta(seconds=60), wait_all_ranks=True)
    dist.destroy_process_group()


def ddp_worker(rank, world, port, backend, out_dir):
    init(rank, world, port, backend)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for _ in range(5):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.save(flat, os.path.join(out_dir, f"{backend}-{rank}.pt"))
    dist.destroy_process_group()


def scaler_worker(rank, world, port, out_dir):
    """DDP with a loss scaler's check: a step whose gradients are not finite
    on any rank is skipped, on every rank alike."""
    init(rank, world, port)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    skipped = []
    for step in range(4):
        x = torch.randn(4, 8, generator=g)
        if step == 1 and rank == 1:
            x[0, 3] = float("inf")  # an overflow on one rank only
        opt.zero_grad()
        ddp(x).sum().backward()  # must not raise
        if all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()):
            opt.step()
        else:
            skipped.append(step)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.save({"skipped": skipped, "params": flat}, os.path.join(out_dir, f"scaler-{rank}.pt"))
    dist.destroy_process_group()


def dying_worker(rank, world, port, queue):
    os.environ["SWITCHML_FAILURE_TIMEOUT_MS"] = "5000"
    init(rank, world, port)
    if rank == 1:
        os._exit(0)  # leaves without a word
    try:
        t = torch.ones(4_000_000)
        for _ in range(1000):
            dist.all_reduce(t)
        queue.put("no error")
    except RuntimeError as e:
        queue.put(str(e))


def late_worker(rank, world, port, timeout_s, late_s, queue):
    """Rank 1 enters an all-reduce `late_s` seconds after rank 0, under a
    group timeout of `timeout_s` and the default failure_timeout_ms (10 s)."""
    init(rank, world, port, timeout=timedelta(seconds=timeout_s))
    x = torch.randn(300_000, generator=torch.Generator().manual_seed(rank))
    on_time = x.clone()
    dist.all_reduce(on_time)
    if rank == 1:
        time.sleep(late_s)
    try:
        dist.all_reduce(x)
        queue.put((rank, "bitwise equal" if torch.equal(x, on_time) else "different"))
    except RuntimeError as e:
        queue.put((rank, str(e)))
    dist.destroy_process_group()


def run_late(timeout_s, late_s):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    with Switch() as sw:
        os.environ["SWITCHML_SWITCH_ADDRESS"] = sw.address
        port = free_port()
        procs = [ctx.Process(target=late_worker, args=(r, 2, port, timeout_s, late_s, queue))
                 for r in range(2)]
        for p in procs:
            p.start()
        results = dict(queue.get(timeout=timeout_s + late_s + 60) for _ in range(2))
        for p in procs:
            p.join(timeout=60)
    return results


class TorchBackendTest(unittest.TestCase):
    def test_a_rank_15_s_late_is_waited_for_under_a_60_s_group_timeout(self):
        self.assertEqual(run_late(timeout_s=60, late_s=15),
                         {0: "bitwise equal", 1: "bitwise equal"})

    def test_a_rank_later_than_the_group_timeout_fails_every_rank_naming_it(self):
        results = run_late(timeout_s=3, late_s=6)
        for rank in (0, 1):
            self.assertRegex(results[rank], r"^switchml all_reduce: .* Timed out after 3\d\d\d ms",
                             f"rank {rank}")
            self.assertIn("no contribution from rank 1 ", results[rank], f"rank {rank}")

    def test_allreduce_of_many_shapes_and_dtypes_equals_gloo(self):
        with Switch() as sw:
            os.environ["SWITCHML_SWITCH_ADDRESS"] = sw.address
            mp.spawn(allreduce_worker, args=(3, free_port()), nprocs=3)

    def test_average_reduce_scatter_warnings_settings_and_counters(self):
        world = 3
        with Switch() as sw:
            os.environ["SWITCHML_SWITCH_ADDRESS"] = sw.address
            mp.spawn(parity_worker, args=(world, free_port()), nprocs=world, join=True)

    def test_ddp_parameters_identical_on_every_rank_and_close_to_gloo(self):
        world = 4
        with tempfile.TemporaryDirectory() as out, Switch() as sw:
            os.environ["SWITCHML_SWITCH_ADDRESS"] = sw.address
            for backend in ("switchml", "gloo"):
                mp.spawn(ddp_worker, args=(world, free_port(), backend, out), nprocs=world)
            ours = [torch.load(os.path.join(out, f"switchml-{r}.pt")) for r in range(world)]
            gloo = torch.load(os.path.join(out, "gloo-0.pt"))
        for r in range(1, world):
            self.assertTrue(torch.equal(ours[r], ours[0]), f"rank {r} differs from rank 0")
        torch.testing.assert_close(ours[0], gloo, rtol=0, atol=1e-5)

    def test_non_finite_gradients_pass_through_so_a_scaler_skips_the_step(self):
        world = 3
        with tempfile.TemporaryDirectory() as out, Switch() as sw:
            os.environ["SWITCHML_SWITCH_ADDRESS"] = sw.address
            mp.spawn(scaler_worker, args=(world, free_port(), out), nprocs=world)
            results = [torch.load(os.path.join(out, f"scaler-{r}.pt")) for r in range(world)]
        for r in range(world):
            self.assertEqual(results[r]["skipped"], [1], f"rank {r}")
            self.assertTrue(torch.equal(results[r]["params"], results[0]["params"]), f"rank {r}")
            self.assertTrue(bool(torch.isfinite(results[r]["params"]).all()), f"rank {r}")

    def test_unreachable_switch_raises(self):
        os.environ["SWITCHML_SWITCH_ADDRESS"] = "127.0.0.1:1"
        import switchml_torch  # noqa: F401
        store = dist.HashStore()
        with self.assertRaisesRegex(RuntimeError, "cannot reach the switch"):
            switchml_torch._create_process_group(store, 0, 1, __import__("datetime").timedelta(seconds=5))

    def test_a_dying_rank_raises_in_the_others(self):
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        with Switch() as sw:
            os.environ["SWITCHML_SWITCH_ADDRESS"] = sw.address
            port = free_port()
            procs = [ctx.Process(target=dying_worker, args=(r, 2, port, queue)) for r in range(2)]
            for p in procs:
                p.start()
            message = queue.get(timeout=120)
            for p in procs:
                p.join(timeout=60)
        self.assertIn("rank 1", message)


if __name__ == "__main__":
    unittest.main()
