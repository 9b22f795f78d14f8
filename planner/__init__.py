"""The planner of the PS-era study: batch size, workers and server shards.

  formulas.py  the cost model, pure functions (seconds, bytes, bytes/s)
"""
