"""--mode=probe: the real network and devices, measured (docs/probe.md).

  run.py          the mode: every phase in turn, probe.json (its schema)
  hosts.py        which devices form a host; the levels of the collectives
  collectives.py  all-reduce and all-gather programs, timed by size
  fit.py          latency and bandwidth from those times (pure)
  step_cost.py    the fixed cost of a data-parallel step (a tiny model)
  compute.py      the named model's compute per per-device batch
  input_rate.py   the input pipeline's rate on real data
  processes.py    barriers and per-process results
  provenance.py   date, commit, hardware, hosts
  report.py       the summary in words
  settings.py     the probe.* keys' checks; message sizes

Above trainer/, models/, input_pipeline/ and configs/, below cli/.
"""
