"""PyTorch's side of `castor-bench scale --vs-pytorch`: worlds of 8 to 64
torch.distributed.rpc workers (TensorPipe) on this machine. Reports, per world
size, the time from starting the processes until rank 0's init_rpc returned,
and the time of an all-to-all round (every worker calls every other one);
a world that does not come up within the limit is reported as missing.
Prints one JSON object. Run by castor-bench with Debian's /usr/bin/python3."""
import argparse
import json
import multiprocessing as mp
import os
import time

import torch
import torch.distributed.rpc as rpc


def rank_of():
    return rpc.get_worker_info().id


def fan_out(world):
    me = rpc.get_worker_info().id
    futs = [rpc.rpc_async(f"worker{r}", rank_of) for r in range(world) if r != me]
    return sum(f.wait() for f in futs)


def worker(rank, world, port, started, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=120, init_method=f"tcp://127.0.0.1:{port}")
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world, rpc_backend_options=opts)
    if rank == 0:
        init_ms = (time.time() - started) * 1e3
        t = time.perf_counter()
        futs = [rpc.rpc_async(f"worker{r}", fan_out, args=(world,)) for r in range(world)]
        total = sum(f.wait() for f in futs)
        queue.put({"init_ms": init_ms, "all_to_all_ms": (time.perf_counter() - t) * 1e3, "ok": total == (world - 1) * world * (world - 1) // 2})
    rpc.shutdown()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=29650)
    p.add_argument("--limit", type=float, default=150.0, help="seconds a world may take")
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    out = {}
    for i, world in enumerate((8, 16, 32, 64)):
        q = ctx.Queue()
        started = time.time()
        procs = [ctx.Process(target=worker, args=(r, world, a.port + i, started, q)) for r in range(world)]
        for pr in procs:
            pr.start()
        try:
            res = q.get(timeout=a.limit)
            if res["ok"]:
                out[f"scale_init_ms_w{world}"] = res["init_ms"]
                out[f"scale_all_to_all_ms_w{world}"] = res["all_to_all_ms"]
        except Exception:
            pass  # did not come up in time: no figure
        # 30 s for the whole world to exit, not 30 s per process: a world
        # that hangs in init (64 workers did) would otherwise take 32 min.
        deadline = time.time() + 30
        for pr in procs:
            pr.join(timeout=max(0.0, deadline - time.time()))
        for pr in procs:
            if pr.is_alive():
                pr.kill()
                pr.join()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
