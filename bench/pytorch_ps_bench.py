"""PyTorch's side of `castor-bench train`: the batch-updating parameter server.

The workload of castor's parameter-server app with the benchmark settings:
1 server (rank 0) + 2 trainers, MLP 784-128-10, plain SGD lr 0.1 on the
server, 64 samples per trainer and step, Fashion-MNIST from Debian's
dataset-fashion-mnist. Each round the server averages both trainers'
gradients, steps once and answers both with the new parameters
(@rpc.functions.async_execution). Usage: pytorch_ps_bench.py [--epochs N]
[--port P]. Prints one JSON object: samples/s (median over epochs) and the
final test accuracy.
"""
import argparse, gzip, json, os, statistics, threading, time

# The same setting as castor's trainers (apps/parameter_server): OpenBLAS's
# own pool, which torch.set_num_threads does not reach, at one thread. It is
# read when the library loads, so before torch is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"
TRAINERS, BATCH, LR, HIDDEN = 2, 64, 0.1, 128


def read_split(split):
    with gzip.open(f"{DATA}/{split}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(f"{DATA}/{split}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.tensor(images, dtype=torch.float32) / 255.0, torch.tensor(labels, dtype=torch.int64)


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(784, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10))


class Server:
    def __init__(self):
        torch.manual_seed(1)
        self.model = make_model()
        self.sums = [torch.zeros_like(p) for p in self.model.parameters()]
        self.arrived = 0
        self.round = torch.futures.Future()
        self.mutex = threading.Lock()

    def snapshot(self):
        return [p.detach().clone() for p in self.model.parameters()]

    @staticmethod
    @rpc.functions.async_execution
    def push(server_rref, grads):
        s = server_rref.local_value()
        with s.mutex:
            for acc, g in zip(s.sums, grads):
                acc += g
            s.arrived += 1
            current = s.round
            if s.arrived == TRAINERS:
                with torch.no_grad():
                    for p, acc in zip(s.model.parameters(), s.sums):
                        p -= LR * acc / TRAINERS
                        acc.zero_()
                s.arrived = 0
                s.round = torch.futures.Future()
                current.set_result(s.snapshot())
        return current


def fetch(server_rref):
    return server_rref.local_value().snapshot()


def train_epoch(server_rref, rank, epoch, steps):
    torch.set_num_threads(1)
    images, labels = read_split("train")
    shard = torch.arange(rank - 1, images.shape[0], TRAINERS)
    shard = shard[torch.randperm(shard.numel(), generator=torch.Generator().manual_seed(epoch * 101 + rank))]
    model = make_model()
    params = rpc.rpc_sync("ps", fetch, args=(server_rref,))
    for step in range(steps):
        with torch.no_grad():
            for p, v in zip(model.parameters(), params):
                p.copy_(v)
        idx = shard[step * BATCH:(step + 1) * BATCH]
        model.zero_grad()
        F.cross_entropy(model(images[idx]), labels[idx]).backward()
        params = rpc.rpc_sync("ps", Server.push, args=(server_rref, [p.grad for p in model.parameters()]))
    return steps


def run(rank, world, port, epochs, queue):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=600)
    rpc.init_rpc("ps" if rank == 0 else f"trainer{rank}", rank=rank, world_size=world, rpc_backend_options=opts)
    if rank == 0:
        server = rpc.RRef(Server())
        test_images, test_labels = read_split("t10k")
        steps = 60000 // (TRAINERS * BATCH)
        rates = []
        for epoch in range(1, epochs + 1):
            start = time.perf_counter()
            futs = [rpc.rpc_async(f"trainer{r}", train_epoch, args=(server, r, epoch, steps))
                    for r in range(1, world)]
            for f in futs:
                f.wait()
            rates.append(steps * TRAINERS * BATCH / (time.perf_counter() - start))
        with torch.no_grad():
            model = server.local_value().model
            accuracy = (model(test_images).argmax(1) == test_labels).float().mean().item()
        queue.put({"train_ps_samples_per_s": statistics.median(rates), "train_ps_test_accuracy": accuracy})
    rpc.shutdown()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--port", type=int, default=29531)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, TRAINERS + 1, a.port, a.epochs, q)) for r in range(TRAINERS + 1)]
    for proc in procs:
        proc.start()
    result = q.get(timeout=1800)
    for proc in procs:
        proc.join(timeout=120)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
