"""Training batches from one data set, evaluation batches from another.

For evaluating on a data set other than the training one's evaluation split
(`eval.dataset`, `eval.split`, `eval.data_dir`): for example imagenet_v2's
test split for an imagenet2012 run. Both must have the same classes in the
same order, or labels would mean different things.
"""

from collections.abc import Iterator

from input_pipeline.dataset import Batch, Dataset
from input_pipeline.errors import DataError


class PairedDataset(Dataset):
  """`train`'s training batches and `evaluation`'s evaluation batches."""

  def __init__(self, train: Dataset, evaluation: Dataset, *, eval_name: str):
    if train.class_names != evaluation.class_names:
      differ = sorted(set(train.class_names) ^ set(evaluation.class_names))
      what = (f'classes only one of them has: {", ".join(differ[:5])}'
              + (' ...' if len(differ) > 5 else '') if differ
              else 'the same classes in another order')
      raise DataError(f'{eval_name} cannot evaluate this run: its classes differ '
                      f'from the training data\'s ({len(evaluation.class_names)} '
                      f'against {len(train.class_names)}; {what})')
    super().__init__(
        class_names=train.class_names, num_train_examples=train.num_train_examples,
        num_eval_examples=evaluation.num_eval_examples, batch_size=train.batch_size,
        eval_batch_size=evaluation.eval_batch_size, seed=train.seed,
        process_index=train.process_index, process_count=train.process_count)
    self._train = train
    self._evaluation = evaluation

  def _side(self, split: str) -> Dataset:
    return self._train if split == 'train' else self._evaluation

  def skipped_counts(self) -> dict[str, int]:
    return {split: self._side(split).skipped_counts()[split] for split in ('train', 'eval')}

  def unreadable_examples(self) -> dict[str, list[str]]:
    return {split: self._side(split).unreadable_examples()[split]
            for split in ('train', 'eval')}

  def example_name(self, split: str, index: int) -> str:
    return self._side(split).example_name(split, index)

  def train_batches(self, start_step: int = 0) -> Iterator[Batch]:
    return self._train.train_batches(start_step)

  def eval_batches(self) -> Iterator[Batch]:
    return self._evaluation.eval_batches()
