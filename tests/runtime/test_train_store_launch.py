#!/usr/bin/env python3
"""`f8c train` launched as torchrun launches its ranks (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT; no MPI), where the ranks meet at a TCP store (runtime/tcp_store.h):

(a) on --device cpu with 2 ranks, refused before anything is compiled or trained, exit status
    non-zero, saying that the CPU backend's collectives need MPI and how to launch instead;
(b) as srun launches without MPI but with MASTER_ADDR and MASTER_PORT: the same;
(c) a torchrun-style launch without MASTER_ADDR, or with a MASTER_PORT that is not a port,
    refused naming the variable.

Usage: test_train_store_launch.py F8C SOURCE_DIR
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import check, finish  # noqa: E402

LAUNCHERS = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "RANK",
             "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
             "MASTER_ADDR", "MASTER_PORT", "PMIX_RANK", "PMI_RANK")


def train(f8c, source, variables):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHERS}
    env.update(variables)
    # The data file is never read: the refusals come first.
    args = [f8c, "train", os.path.join(source, "models", "gpt-tiny.json"), "--data",
            "/nonexistent/tokens.bin", "--train-iters", "1", "--seq-length", "16",
            "--micro-batch-size", "2", "--device", "cpu"]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)


def main():
    f8c, source = sys.argv[1], sys.argv[2]
    torchrun = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29500"}
    srun = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for name, variables in (("torchrun", torchrun), ("srun", srun)):
        run = train(f8c, source, variables)
        check(run.returncode != 0, f"({name}) --device cpu over the store: exit status non-zero",
              run.stderr)
        check(f"{name} started 2 ranks without MPI, and the CPU backend's collectives need MPI"
              in run.stderr and "launch with mpirun or srun --mpi, or use --device cuda"
              in run.stderr, f"({name}) the refusal says why and what to do", run.stderr)
        check("iteration" not in run.stderr, f"({name}) no step ran", run.stderr)
    missing = dict(torchrun)
    del missing["MASTER_ADDR"]
    run = train(f8c, source, missing)
    check(run.returncode != 0 and "no MASTER_ADDR" in run.stderr,
          "without MASTER_ADDR: refused naming it", run.stderr)
    run = train(f8c, source, dict(torchrun, MASTER_PORT="port"))
    check(run.returncode != 0 and "MASTER_PORT" in run.stderr,
          "a MASTER_PORT that is not a port: refused naming it", run.stderr)
    sys.exit(finish())


main()
