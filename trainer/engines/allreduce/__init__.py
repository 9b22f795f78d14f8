"""The all-reduce emulation: workers are devices, and their gradients travel
around a ring over the same paced links as the parameter-server engine's.

  ring.py     the ring's schedule (pure) and one worker's part in it
  update.py   every worker's optax update of the summed gradients, on its
              device, in one program over the worker devices
  engine.py   the step, its timings and metrics, and the state

It shares the links, the wire layout, the workers' gradient programs and
the threads with the parameter-server engine (trainer/engines/emulation/).
"""
