"""The parameter-server engine: workers are devices, server shards live in
host memory, and every byte between them crosses an emulated network link.

  partition.py  which shard owns which rows of which variable (pure)
  shard.py      a server shard: its variables, optimiser state and updates
  state_split.py  TrainState <-> per-shard pieces (checkpoints stay SPMD's)
  cluster.py    what both modes share: the worker devices, the shards, the
                NICs, push and pull, counters, state in and out
  sync_engine.py  the synchronous engine: push, aggregate and update, pull
  async_engine.py  the asynchronous engine; async_workers.py its worker
                threads (stale-synchronous parallel)
  engine.py     `create`: the engine of the configured ps.mode
The links, the wire layout, the workers' programs and the threads are the
emulated engines' shared parts (trainer/engines/emulation/).
"""
