"""The parameter-server engine: workers are devices, server shards live in
host memory, and every byte between them crosses an emulated network link.

  partition.py  which shard owns which rows of which variable (pure)
  link.py       network interfaces and real transfers paced in real time
  shard.py      a server shard: its variables, optimiser state and updates
  state_split.py  TrainState <-> per-shard pieces (checkpoints stay SPMD's)
  wire.py       a worker's variables as one vector on the wire
  workers.py    the workers' gradient programs (the shared loss code) and
                their memory check
  engine.py     the synchronous step, timings, metrics and checkpoints
  async_workers.py  the asynchronous workers (stale-synchronous parallel)
  threads.py    the engine's threads: failures reach the loop, close joins
"""
