"""The parameter-server engine: workers are devices, server shards live in
host memory, and every byte between them crosses an emulated network link.

  partition.py  which shard owns which rows of which variable (pure)
  link.py       network interfaces and real transfers paced in real time
  shard.py      a server shard: its variables, optimiser state and updates
  state_split.py  TrainState <-> per-shard pieces (checkpoints stay SPMD's)
  workers.py    the workers' gradient programs (the shared loss code)
  engine.py     the synchronous and asynchronous step, timings and metrics
"""
