"""The parameter-server engine: workers are devices, server shards live in
host memory, and every byte between them crosses an emulated network link.

  partition.py  which shard owns which rows of which variable (pure)
  shard.py      a server shard: its variables, optimiser state and updates
  state_split.py  TrainState <-> per-shard pieces (checkpoints stay SPMD's)
  engine.py     the synchronous step, timings, metrics and checkpoints
  async_workers.py  the asynchronous workers (stale-synchronous parallel)
The links, the wire layout, the workers' programs and the threads are the
emulated engines' shared parts (trainer/engines/emulation/).
"""
