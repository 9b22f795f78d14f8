"""How fast this host's input pipeline makes batches of the configured data.

The same measurement as --mode=bench with bench.data=real
(trainer/host_input.py: time_input): the pipeline alone, no step, every process
at once, each on its share of the data. CPU time per image is the
process's own (tf.data's threads included); images/s per core follows
from it.
"""

from coordination import stall_notice
from input_pipeline import create_dataset
from probe import processes
from trainer import host_input
from trainer import input_wait

_WARMUP_BATCHES = 1  # the pipeline's threads start and its buffers fill


def dataset(config):
  """This process's share of the configured data (None for synthetic data)."""
  import jax  # pylint: disable=g-import-not-at-top
  if config.data.source == 'synthetic':
    return None
  return create_dataset(config.data, batch_size=config.batch_size,
                        eval_batch_size=config.batch_size, seed=config.seed,
                        process_index=jax.process_index(),
                        process_count=jax.process_count())


def measure(config, data, batches: int) -> dict:
  """{'images_per_sec', 'cpu_ms_per_image', 'images_per_sec_per_core',
  'host_cores'} of this process's pipeline.

  A pipeline that produces nothing for data.stall_timeout_s ends the probe
  with InputStalled (exit 69) on every process: the stalled one publishes
  it, and its peers, waiting in the next collective, leave with its line.
  """
  import jax  # pylint: disable=g-import-not-at-top
  processes.barrier()
  with stall_notice.shared(jax.process_index(), jax.process_count()):
    # time_input closes the stream: its threads stop before anything else is timed.
    images_per_sec, cpu_ms = host_input.time_input(
        data.train_batches(0), _WARMUP_BATCHES, batches,
        pipeline=input_wait.pipeline_name(config),
        stall_timeout_s=config.data.stall_timeout_s)
  cpu_ms = round(cpu_ms, 3)  # as bench records it: the verdict's words follow from it
  return {'images_per_sec': images_per_sec, 'cpu_ms_per_image': cpu_ms,
          'images_per_sec_per_core': 1000.0 / cpu_ms, 'host_cores': host_input.host_cores()}
