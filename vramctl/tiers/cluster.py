"""Sharded stack-distance counting on a Dask cluster (`tiers simulate --dask ADDRESS|local`).

Dask rather than Ray (docs/tiers.md): `dask[distributed]` is pure Python (a few MB, seconds to install),
its LocalCluster runs worker processes on 127.0.0.1 with no dashboard, and a scheduler address is all a
real cluster needs; Ray's wheel is large, native, and its local mode starts a GCS, a dashboard and an object
store. The shards are the same as `--workers` (points partitioned by block hash, counts summed), so the
curve is identical to a single process's.

A worker that dies is retried once (the scheduler's `allowed-failures` is 1); a second death, or a shard
that raises, is a ShardFailedError: one line, exit 2, no partial curve.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.tiers.stackdist import ShardFailedError, ShardRunner, dominance_counts

_ADDRESS = re.compile(r"^(?:tcp|tls)://[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")


def count_shard(part: tuple[Any, Any], queries: tuple[Any, Any]) -> Any:
    return dominance_counts(part[0], part[1], queries[0], queries[1])


def dask_runner(address: str, workers: int, fn: Any = count_shard) -> ShardRunner:
    """`address`: a scheduler (tcp://host:port), or `local` for a LocalCluster of `workers` processes on
    127.0.0.1 (nothing listens beyond loopback; no dashboard)."""
    if address != "local" and not _ADDRESS.match(address):
        raise BadInputError(f"--dask {address}: not a scheduler address (tcp://HOST:PORT) or `local`")
    try:
        import dask
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise BadInputError(
            f"--dask {address}: needs the optional Dask package (pip install 'vramctl[tiers-cluster]')"
        ) from None

    def run(shards: Sequence[tuple[Any, Any]], lo: Any, s: Any) -> list[Any]:
        with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
            cluster: Any = None
            try:
                if address == "local":
                    cluster = LocalCluster(
                        n_workers=workers,
                        threads_per_worker=1,
                        processes=True,
                        host="127.0.0.1",
                        dashboard_address=None,
                        silence_logs=logging.ERROR,
                    )
                    client = Client(cluster)
                else:
                    client = Client(address, timeout="10s")
            except (OSError, TimeoutError) as exc:
                if cluster is not None:
                    cluster.close()
                raise BadInputError(f"--dask {address}: cannot reach the scheduler ({exc})") from None
            try:
                queries = client.scatter((lo, s), broadcast=True)
                futures = [client.submit(fn, part, queries, pure=False, retries=1) for part in shards]
                try:
                    return list(client.gather(futures))
                except Exception as exc:  # KilledWorker, a worker's MemoryError, a lost connection
                    raise ShardFailedError(
                        f"--dask {address}: a shard failed twice ({type(exc).__name__}: {str(exc)[:200]}); "
                        "no partial curve is reported"
                    ) from None
            finally:
                client.close()
                if cluster is not None:
                    cluster.close()

    return run
