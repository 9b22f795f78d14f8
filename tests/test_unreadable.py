"""Unreadable examples: each counted once over epochs, processes and
restarts, and named in the work dir's unreadable_files.txt."""

import io
import itertools

import numpy as np
from PIL import Image

from configs import default
import input_pipeline
from trainer import unreadable


class _Dataset:
  """What a data set reports: the distinct unreadable examples it met."""

  def __init__(self):
    self.found = {'train': set(), 'eval': set()}

  def unreadable_examples(self):
    return {split: sorted(names) for split, names in self.found.items()}


def _other_process(names):
  """An allgather in which a second process contributes `names` (its sizes
  first, then its padded bytes), as multihost_utils.process_allgather would."""
  theirs = unreadable._encode(names)

  def allgather(mine):
    if mine.dtype == np.int64:  # the sizes
      return np.stack([mine, np.array([len(names), len(theirs)], np.int64)])
    padded = np.zeros_like(mine)
    padded[:len(theirs)] = theirs
    return np.stack([mine, padded])
  return allgather


def test_names_are_written_once_however_often_they_are_read(tmp_path):
  dataset = _Dataset()
  examples = unreadable.UnreadableExamples(str(tmp_path), dataset, process_count=1,
                                           is_chief=True)
  examples.update()
  assert examples.count() == 0 and unreadable.read(str(tmp_path)) == []
  dataset.found['train'].add('train/a/3.jpg')
  examples.update()
  dataset.found['eval'].add('val/a/2.jpg')  # a second epoch reads 3.jpg again
  examples.update()
  assert examples.count() == 2
  assert unreadable.read(str(tmp_path)) == ['train/a/3.jpg', 'val/a/2.jpg']

  # A resumed run starts from the file and adds only what is new.
  resumed = unreadable.UnreadableExamples(str(tmp_path), _Dataset(), process_count=1,
                                          is_chief=True)
  resumed._dataset.found['train'] |= {'train/a/3.jpg', 'train/b/9.jpg'}
  resumed.update()
  assert resumed.count() == 3
  assert unreadable.read(str(tmp_path)) == ['train/a/3.jpg', 'train/b/9.jpg',
                                            'val/a/2.jpg']


def test_names_from_all_processes_are_merged_and_counted_once(tmp_path):
  # In another epoch the same example falls to another process: both report it.
  dataset = _Dataset()
  dataset.found['train'] |= {'train[5]', 'train[17]'}
  examples = unreadable.UnreadableExamples(
      str(tmp_path), dataset, process_count=2, is_chief=True,
      allgather=_other_process(['train[17]', 'train[40]']))
  examples.update()
  assert examples.count() == 3
  assert unreadable.read(str(tmp_path)) == ['train[17]', 'train[40]', 'train[5]']


def test_a_process_other_than_the_first_writes_nothing(tmp_path):
  dataset = _Dataset()
  dataset.found['train'].add('train[5]')
  examples = unreadable.UnreadableExamples(
      str(tmp_path), dataset, process_count=2, is_chief=False,
      allgather=_other_process([]))
  examples.update()
  assert examples.count() == 1
  assert not (tmp_path / unreadable.FILE_NAME).exists()


def test_a_folder_data_set_names_a_corrupt_file_once_over_two_epochs(tmp_path):
  for split, count in (('train', 7), ('val', 3)):
    (tmp_path / split / 'a').mkdir(parents=True)
    for i in range(count):
      buffer = io.BytesIO()
      Image.fromarray(np.full((12, 12, 3), 10 * i, np.uint8)).save(buffer, 'PNG')
      (tmp_path / split / 'a' / f'{i}.png').write_bytes(buffer.getvalue())
  broken = tmp_path / 'train' / 'a' / 'broken.png'
  broken.write_bytes(b'\x89PNG not really')
  data = default.get_config().data
  data.update(dict(source='folder', dir=str(tmp_path), image_size=8, augment='none'))
  dataset = input_pipeline.create_dataset(data, batch_size=4, eval_batch_size=4, seed=0)
  list(itertools.islice(dataset.train_batches(), 4))  # two epochs of 8 files
  list(dataset.eval_batches())
  assert dataset.skipped_counts()['train'] == 2  # read, and skipped, twice
  assert dataset.unreadable_examples() == {'train': [str(broken)], 'eval': []}


def test_names_survive_the_real_gather(tmp_path):
  # JAX's process_allgather in this one process: the sizes, then the names'
  # bytes padded to the longest, decoded back (non-ASCII included).
  dataset = _Dataset()
  dataset.found['train'] |= {'train/é/3.jpg', 'train/a/10.jpg'}
  examples = unreadable.UnreadableExamples(str(tmp_path), dataset, process_count=2,
                                           is_chief=True)
  examples.update()
  assert unreadable.read(str(tmp_path)) == ['train/a/10.jpg', 'train/é/3.jpg']
