#!/usr/bin/env python3
"""Train a small MLP with DistributedDataParallel on 4 local processes, once
through the switchml backend (a software switch on this machine) and once
with gloo, and print the loss per epoch and the time per step side by side.

    PYTHONPATH=build/python /usr/bin/python3 examples/ddp_train.py [--workers 4] [--epochs 3]

The only switchml-specific lines are `import switchml_torch` and the backend
name; SWITCHML_SWITCH_ADDRESS points at the switch (this script starts one
from build/ when it is not set).

With --rank it runs one rank of one backend only (as on a cluster, one
process per host; bench/netns_ddp does that in an emulated rack), and rank 0
prints one JSON line: backend, losses, median time per step.
"""
import json
import argparse
import os
import shutil
import socket
import subprocess
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))


def skip_allreduce(state, bucket):
    """A DDP communication hook that all-reduces nothing: what a step costs
    without communication (--backend none)."""
    done = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


def train(rank, world, port, backend, args, results):
    import switchml_torch  # noqa: F401  registers "switchml"
    os.environ.update(MASTER_ADDR=args.master_addr, MASTER_PORT=str(port))
    dist.init_process_group("gloo" if backend == "none" else backend, rank=rank, world_size=world)
    torch.set_num_threads(1)  # one core's worth per rank: ranks share this machine
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.classes))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    if backend == "none":
        ddp.register_comm_hook(None, skip_allreduce)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    # Synthetic data: a fixed random linear teacher labels Gaussian inputs.
    teacher = torch.randn(args.features, args.classes, generator=torch.Generator().manual_seed(1))
    data = torch.Generator().manual_seed(100 + rank)
    losses, step_times = [], []
    for epoch in range(args.epochs):
        total = 0.0
        for _ in range(args.steps):
            x = torch.randn(args.batch, args.features, generator=data)
            y = (x @ teacher).argmax(dim=1)
            start = time.perf_counter()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            step_times.append(time.perf_counter() - start)
            total += loss.item()
        mean = torch.tensor([total / args.steps])
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    if rank == 0:
        results.put((backend, losses, sorted(step_times)[len(step_times) // 2]))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=20, help="steps per epoch")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build"), help="where switchml-switch is")
    p.add_argument("--rank", type=int, help="run only this rank (with --backend, --master-port)")
    p.add_argument("--backend", default="switchml", choices=["switchml", "gloo", "none"],
                   help="with --rank; none: DDP without all-reduces (the computation alone)")
    p.add_argument("--master-addr", default="127.0.0.1", help="rank 0's address (the store)")
    p.add_argument("--master-port", type=int, default=29500)
    args = p.parse_args()

    if args.rank is not None:
        # One rank of a job whose other ranks run elsewhere; the switch runs elsewhere too.
        class Results:
            def put(self, item):
                backend, losses, step = item
                print(json.dumps({"backend": backend, "workers": args.workers, "losses": losses,
                                  "median_step_s": step}), flush=True)
        train(args.rank, args.workers, args.master_port, args.backend, args, Results())
        return

    switch = None
    ports_dir = None
    if "SWITCHML_SWITCH_ADDRESS" not in os.environ:
        ports_dir = tempfile.mkdtemp(prefix="switchml-ddp-")
        ports = os.path.join(ports_dir, "ports")
        switch = subprocess.Popen([os.path.join(args.bin, "switchml-switch"), "--bind", "127.0.0.1",
                                   "--control-port", "0", "--data-port", "0", "--port-file", ports,
                                   "--log-level", "warn"])
        while not os.path.exists(ports):
            time.sleep(0.01)
        with open(ports) as f:
            os.environ["SWITCHML_SWITCH_ADDRESS"] = "127.0.0.1:" + f.read().split()[0]
    try:
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        runs = {}
        for backend in ("switchml", "gloo"):
            mp.spawn(train, args=(args.workers, free_port(), backend, args, results), nprocs=args.workers)
            name, losses, step = results.get()
            runs[name] = (losses, step)
    finally:
        if switch:
            switch.terminate()
            switch.wait()
        if ports_dir:
            shutil.rmtree(ports_dir, ignore_errors=True)
    params = args.features * args.hidden + args.hidden * args.hidden + args.hidden * args.classes
    print(f"DDP, {args.workers} processes, MLP with {params / 1e6:.2f} M parameters, batch {args.batch} per rank")
    print(f"{'epoch':>5}  {'switchml loss':>13}  {'gloo loss':>9}")
    for e in range(args.epochs):
        print(f"{e + 1:>5}  {runs['switchml'][0][e]:>13.4f}  {runs['gloo'][0][e]:>9.4f}")
    s, g = runs["switchml"][1], runs["gloo"][1]
    print(f"median time per step: switchml {s * 1e3:.1f} ms, gloo {g * 1e3:.1f} ms (ratio {s / g:.2f})")


if __name__ == "__main__":
    main()
