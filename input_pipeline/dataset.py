"""The interface every data source hands to the trainer."""

import abc
from collections.abc import Iterator

import numpy as np

from input_pipeline import order
from input_pipeline.augmentation import HostAugmentation, OFF

Batch = dict[str, np.ndarray]


class Dataset(abc.ABC):
  """Host batches of one process, for training and for evaluation.

  Batches are numpy dicts: 'image' uint8 [B/P, S, S, 3], 'label' int32 [B/P],
  and for evaluation 'mask' bool [B/P] (False on padding). B is the global
  batch size and P the number of processes; the trainer assembles the shares
  of all processes into global arrays and normalises on the device.

  Attributes:
    class_names: class names in label order.
    num_classes: len(class_names).
    num_train_examples: examples in the training split (all processes).
    num_eval_examples: examples in the evaluation split (all processes).
    num_eval_batches: batches `eval_batches` yields, the same on every process.
    augmentation: what the host adds to training images after the crop and
      flip (augmentation.py); sources that decode images apply it.

  Examples that cannot be decoded (a corrupt or truncated image) are skipped
  and counted, never fatal: see `skipped_counts` and `unreadable_examples`.
  """

  augmentation: HostAugmentation = OFF

  def __init__(self, *, class_names: list[str], num_train_examples: int,
               num_eval_examples: int, batch_size: int, eval_batch_size: int,
               seed: int, process_index: int, process_count: int):
    order.check_process_index(process_index, process_count)
    self.class_names = list(class_names)
    self.num_classes = len(self.class_names)
    self.num_train_examples = num_train_examples
    self.num_eval_examples = num_eval_examples
    self.batch_size = batch_size
    self.eval_batch_size = eval_batch_size
    self.local_batch_size = order.local_batch_size(batch_size, process_count)
    self.local_eval_batch_size = order.local_batch_size(
        eval_batch_size, process_count)
    self.num_eval_batches = order.num_eval_batches(
        num_eval_examples, eval_batch_size)
    self.seed = seed
    self.process_index = process_index
    self.process_count = process_count
    # Updated by the sources that decode files as their batches are produced:
    # skip events, and the indices of the distinct examples skipped.
    self._skipped = {'train': 0, 'eval': 0}
    self._unreadable = {'train': set(), 'eval': set()}

  def skipped_counts(self) -> dict[str, int]:
    """Unreadable examples that this process skipped, by split.

    'train': since this Dataset was made, over the batches handed out so far
    (including those a prefetcher holds). Such a training batch is still
    full: the step's readable examples fill the slots of the skipped ones.
    'eval': in the evaluation pass in progress or the last one completed;
    those examples are masked out, so the examples a pass evaluates plus
    these, summed over processes, are `num_eval_examples`.
    """
    return dict(self._skipped)

  def unreadable_examples(self) -> dict[str, list[str]]:
    """Names of the distinct examples this process found unreadable, by split.

    Since this Dataset was made, each example once however often it was
    read (a training example comes back every epoch). Names are the same on
    every process, so the union over processes counts each example once.
    """
    return {split: sorted(self.example_name(split, i) for i in indices)
            for split, indices in self._unreadable.items()}

  def example_name(self, split: str, index: int) -> str:
    """How an example is named to the user; sources of files say the file."""
    return f'{split} example {index}'

  @abc.abstractmethod
  def train_batches(self, start_step: int = 0) -> Iterator[Batch]:
    """Endless training batches from `start_step`; pure in (seed, step)."""

  @abc.abstractmethod
  def eval_batches(self) -> Iterator[Batch]:
    """`num_eval_batches` batches that together cover every example once."""
