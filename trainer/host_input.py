"""A host's cores against its devices: can the input pipeline keep up?

Decoding and augmenting an image costs `cpu_ms_per_image` milliseconds of
CPU time (all of tf.data's threads); C cores that do nothing else decode at
most C * 1000 / cpu_ms_per_image images a second. A host whose devices take
more images a second than that is input-bound: the step waits for input,
whatever the devices and the network could do. `time_input` measures the
cost, for --mode=bench (bench.data='real') and for the probe; the planner
takes it as given (plan.host_cpu_ms_per_image).
"""

import math
import os
import time

from trainer import input_wait


def images_per_sec(cores: float, cpu_ms_per_image: float) -> float:
  """The most images a second `cores` busy cores decode."""
  return cores * 1000.0 / cpu_ms_per_image


def cores_needed(device_images_per_sec: float, cpu_ms_per_image: float) -> int:
  """Whole cores that decode `device_images_per_sec` images a second."""
  # Rounded to 9 digits first, so that float error never adds a core.
  return math.ceil(round(device_images_per_sec * cpu_ms_per_image / 1000.0, 9))


def _cores(number: int) -> str:
  return f'{number} core{"s" if number != 1 else ""}'


def verdict(device_images_per_sec: float, cores: int,
            cpu_ms_per_image: float) -> str:
  """One sentence: whether `cores` keep up with the devices of one host."""
  supply = images_per_sec(cores, cpu_ms_per_image)
  needed = cores_needed(device_images_per_sec, cpu_ms_per_image)
  if supply < device_images_per_sec:
    return (f"input-bound: the host's {_cores(cores)} decode at most "
            f'{supply:,.0f} images/s at {cpu_ms_per_image:g} CPU-ms per image, '
            f'its devices take {device_images_per_sec:,.0f}; feeding them '
            f'takes {_cores(needed)}')
  return (f"the host's {_cores(cores)} keep up: they decode up to "
          f'{supply:,.0f} images/s at {cpu_ms_per_image:g} CPU-ms per image, '
          f'its devices take {device_images_per_sec:,.0f} ({_cores(needed)} '
          'busy)')


def host_cores() -> int:
  """The cores this process may run on (its CPU affinity)."""
  return len(os.sched_getaffinity(0))


def time_input(batches, warmup_batches: int, timed_batches: int, *,
               pipeline: str, stall_timeout_s: float) -> tuple[float, float]:
  """(images per second, CPU ms per image) of host batches, no step.

  The batches are waited for as the training loop waits for them
  (input_wait.WaitedStream): a source that stops producing ends the timing
  with InputStalled after `stall_timeout_s` (0: never), naming `pipeline`,
  and a stop signal's handler runs during the wait. Nothing else runs here,
  so each batch is taken as soon as it is made: the clock sees the
  pipeline's own pace. `batches` is closed at the end (its threads stop).

  CPU time is the process's (time.process_time: tf.data's threads
  included), which other work on the machine disturbs far less than the
  wall clock.
  """
  stream = input_wait.WaitedStream(batches, pipeline, stall_timeout_s, ahead=1)
  try:
    for _ in range(warmup_batches):
      next(stream)
    images = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(timed_batches):
      images += len(next(stream)['label'])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  except BaseException:
    stream.close(wait_s=0)  # a stalled source may never return: not waited for
    raise
  stream.close()
  return images / wall, 1000.0 * cpu / images
