"""PyTorch's side of castor-bench: the same figures, measured the same way.

Run by `castor-bench <suite> --vs-pytorch` with Debian's /usr/bin/python3
(python3-torch 1.13). Usage: pytorch_bench.py SUITE [--port P]
Prints one JSON object {figure: value}. Each figure is the median of many
repetitions, like castor's; two worker processes on loopback, TensorPipe.
"""
import argparse, json, os, statistics, sys, time
import torch
import torch.distributed.rpc as rpc
import torch.distributed.autograd as dist_autograd
import torch.multiprocessing as mp


def add(a, b):
    return a + b


def ident(x):
    return x


def median_us(n, fn, warmup=50):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return 1e6 * statistics.median(samples)


def suite_rpc(out, reps):
    x = torch.ones(2)
    out["rpc_sync_udf_us"] = median_us(3000 * reps, lambda: rpc.rpc_sync("worker1", add, args=(x, x)), 200)
    out["rpc_sync_builtin_us"] = median_us(3000 * reps, lambda: rpc.rpc_sync("worker1", torch.add, args=(x, x)), 200)
    rates = []
    for _ in range(5):
        n = 20000
        t = time.perf_counter()
        torch.futures.wait_all([rpc.rpc_async("worker1", add, args=(x, x)) for _ in range(n)])
        rates.append(n / (time.perf_counter() - t))
    out["rpc_async_calls_per_s"] = statistics.median(rates)
    for mb, n in ((1, 50), (64, 7)):
        big = torch.rand(mb * 1024 * 1024 // 4)
        out[f"echo_{mb}MiB_ms"] = median_us(n * reps, lambda: rpc.rpc_sync("worker1", ident, args=(big,)), 2) / 1e3


def suite_rref(out, reps):
    x = torch.ones(2)
    out["remote_to_here_us"] = median_us(2000 * reps, lambda: rpc.remote("worker1", add, args=(x, x)).to_here(), 100)


def sum_of_rref(r):
    return r.to_here().sum()


def suite_rref_passed_on(out, reps):
    # PyTorch's functions take the RRef and fetch inside: one way for both of
    # castor's figures (castor's by-value form borrows the fork, G3).
    x = torch.ones(2)
    us = median_us(1000 * reps, lambda: rpc.rpc_sync("worker2", sum_of_rref, args=(rpc.remote("worker1", ident, args=(x,)),)), 100)
    out["rref_passed_on_by_value_us"] = us
    out["rref_passed_on_as_rref_us"] = us


def suite_autograd(out, reps):
    a = torch.rand(3, 3, requires_grad=True)
    b = torch.rand(3, 3, requires_grad=True)

    def fwd_bwd():
        with dist_autograd.context() as cid:
            c = rpc.rpc_sync("worker1", torch.add, args=(a, b))
            dist_autograd.backward(cid, [c.sum()])
            dist_autograd.get_gradients(cid)

    out["dist_autograd_1hop_us"] = median_us(1000 * reps, fwd_bwd, 50)


def chain_step(route, t):
    if not route:
        return t * 2
    return rpc.rpc_sync(route[0], chain_step, args=(route[1:], t * 2))


def suite_autograd_chain(out, reps):
    a = torch.rand(3, 3, requires_grad=True)

    def fwd_bwd():
        with dist_autograd.context() as cid:
            c = rpc.rpc_sync("worker1", chain_step, args=(["worker2", "worker3"], a))
            dist_autograd.backward(cid, [c.sum()])
            dist_autograd.get_gradients(cid)

    out["dist_autograd_chain4_us"] = median_us(300 * reps, fwd_bwd, 20)


def suite_sweep(out, reps):
    for kib in (1, 16, 256, 1024, 4096, 16384, 65536):
        x = torch.rand(kib * 1024 // 4)
        n = max(7, min(1000, 200000 // kib)) * reps
        us = median_us(n, lambda: rpc.rpc_sync("worker1", ident, args=(x,)), 3)
        out[f"sweep_echo_{kib}KiB_us"] = us
        out[f"sweep_echo_{kib}KiB_MiB_per_s"] = 2.0 * kib / 1024 / (us / 1e6)


def durable_save(state, path):
    # castor's checkpoint syncs every file before it commits; so does this side.
    torch.save(state, path)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return os.path.getsize(path)


def save_module(module_rref, path):
    return durable_save(module_rref.local_value().state_dict(), path)


def suite_recovery(out, reps):
    # The modules of castor's recovery suite, saved PyTorch's way: an RPC to
    # the owner to torch.save its module, torch.save of the local one, each
    # synced to the disk like castor's files, and a small JSON index. (torch.distributed.optim.DistributedOptimizer has no
    # state_dict: Adam's state cannot be saved, so there is no such figure.)
    from torch.distributed.optim import DistributedOptimizer
    import tempfile
    body = rpc.remote("worker1", torch.nn.Linear, args=(1024, 1024))
    head = torch.nn.Linear(1024, 10)
    folder = tempfile.mkdtemp(prefix="pytorch-bench-checkpoint-")

    def save():
        pending = rpc.rpc_async("worker1", save_module, args=(body, os.path.join(folder, "body.pt")))
        durable_save(head.state_dict(), os.path.join(folder, "head.pt"))
        size = pending.wait()
        with open(os.path.join(folder, "index.json"), "w") as f:
            json.dump({"body": size}, f)

    out["checkpoint_modules_save_ms"] = median_us(10 * reps, save, 2) / 1e3
    params = [rpc.RRef(p) for p in head.parameters()]
    params += rpc.rpc_sync("worker1", param_rrefs, args=(body,))
    opt = DistributedOptimizer(torch.optim.Adam, params, lr=1e-3)
    x, y = torch.randn(64, 1024), torch.randn(64, 10)

    def ten_steps():
        for _ in range(10):
            with dist_autograd.context() as cid:
                h = body.rpc_sync().forward(x).relu()
                loss = torch.nn.functional.mse_loss(head(h), y)
                dist_autograd.backward(cid, [loss])
                opt.step(cid)

    out["train_10_steps_ms"] = median_us(5 * reps, ten_steps, 1) / 1e3
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    os.rmdir(folder)


def param_rrefs(module_rref):
    return [rpc.RRef(p) for p in module_rref.local_value().parameters()]


SUITES = {"rpc": suite_rpc, "rref": suite_rref, "autograd": suite_autograd, "sweep": suite_sweep,
          "recovery": suite_recovery}
# Suites that need more than two workers, with their world size.
WIDE = {"autograd": (suite_autograd_chain, 4), "rref": (suite_rref_passed_on, 3)}


def worker(rank, world, port, suites, reps, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=120)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world, rpc_backend_options=opts)
    if rank == 0:
        out = {}
        for s in suites:
            if world == 2:
                SUITES[s](out, reps)
            elif s in WIDE and WIDE[s][1] == world:
                WIDE[s][0](out, reps)
        queue.put(out)
    rpc.shutdown()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("suites", nargs="+", choices=sorted(SUITES))
    p.add_argument("--port", type=int, default=29611)
    p.add_argument("--reps", type=int, default=1)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    out = {}
    worlds = [2] + sorted({WIDE[s][1] for s in a.suites if s in WIDE})
    for i, world in enumerate(worlds):
        q = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, world, a.port + i, a.suites, a.reps, q)) for r in range(world)]
        for pr in procs:
            pr.start()
        out.update(q.get(timeout=1800))
        for pr in procs:
            pr.join(timeout=120)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
