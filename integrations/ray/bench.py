"""Paired throughput: the same batch of Tier B runs of ``true`` through Ray (tierbox-ray
on a local cluster of two worker raylets, ``tierbox: PER_NODE`` each) and through one
local daemon (the same concurrency, from a thread pool), alternating batches so both see
the same machine load. Prints runs per second of each and the median ratio of pairs.

    TIERBOX_BIN=target/release/tierbox python3 integrations/ray/bench.py [ROUNDS] [BATCH]
"""

import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import tierbox_ray  # noqa: E402

PER_NODE = 2


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    base = tempfile.mkdtemp(prefix="tierbox-ray-bench-")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        c.add_node(num_cpus=2, resources={"tierbox": PER_NODE})
    ray.init(address=c.address, log_to_driver=False)
    tierbox_ray.wait_for_nodes(2)
    infos = tierbox_ray.init(base_dir=base)
    # The local reference: one of the nodes' daemons, driven directly.
    info = next(iter(infos.values()))
    os.makedirs(os.path.join(info["workspace"], "bench"), exist_ok=True)
    local = tierbox_ray.DaemonClient(info["socket"], info["token"], session="bench")
    request = {"command": "true", "tier": "b", "workspace": "bench"}
    concurrency = PER_NODE * len(infos)

    def through_ray():
        t = time.perf_counter()
        results = ray.get([tierbox_ray.submit(["true"], tier="b") for _ in range(batch)])
        assert all(r.exit_code == 0 for r in results)
        return batch / (time.perf_counter() - t)

    def through_daemon():
        t = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            outcomes = list(pool.map(lambda _: local.run(dict(request)), range(batch)))
        assert all(o["exit_code"] == 0 for o in outcomes)
        return batch / (time.perf_counter() - t)

    through_ray()  # warm-up: worker processes, node actors
    through_daemon()
    pairs = []
    for i in range(rounds):
        if i % 2 == 0:
            r, d = through_ray(), through_daemon()
        else:
            d, r = through_daemon(), through_ray()
        pairs.append((r, d))
    print(f"{rounds} rounds of {batch} Tier B runs of true, concurrency {concurrency}, {os.cpu_count()} cores")
    print(f"through Ray (2 nodes x {PER_NODE})   median {statistics.median(p[0] for p in pairs):7.1f} runs/s")
    print(f"one local daemon ({concurrency} threads) median {statistics.median(p[1] for p in pairs):7.1f} runs/s")
    print(f"ratio ray / daemon: median of pairs {statistics.median(p[0] / p[1] for p in pairs):.2f}")
    tierbox_ray.shutdown()
    ray.shutdown()
    c.shutdown()


if __name__ == "__main__":
    main()
