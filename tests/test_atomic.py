"""core/atomic.py: a file is replaced whole or not at all, and a failed
write leaves nothing behind."""

import errno
import os

import pytest

from core import atomic


def _names(directory):
  return sorted(os.listdir(directory))


def test_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
  path = tmp_path / 'config.json'
  atomic.write_text(str(path), 'first')
  atomic.write_text(str(path), 'second, longer ünïcode')
  assert path.read_text(encoding='utf-8') == 'second, longer ünïcode'
  atomic.write_bytes(str(path), b'\x00\xff')
  assert path.read_bytes() == b'\x00\xff'
  assert _names(tmp_path) == ['config.json']


@pytest.mark.parametrize('failing', ['fsync', 'replace'])
@pytest.mark.parametrize('error', [OSError(errno.ENOSPC, 'No space left on device'),
                                   KeyboardInterrupt()], ids=['disk full', 'interrupt'])
def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(
    tmp_path, monkeypatch, failing, error):
  path = tmp_path / 'unreadable_files.txt'
  path.write_text('old\n')

  def fail(*_):
    raise error
  monkeypatch.setattr(atomic.os, failing, fail)
  with pytest.raises(type(error)):
    atomic.write_text(str(path), 'new\n')
  monkeypatch.undo()
  assert path.read_text() == 'old\n'
  assert _names(tmp_path) == ['unreadable_files.txt']


def test_a_write_into_a_missing_folder_fails_and_creates_nothing(tmp_path):
  with pytest.raises(FileNotFoundError):
    atomic.write_text(str(tmp_path / 'missing' / 'classes.json'), '{}')
  assert _names(tmp_path) == []


def test_the_file_gets_the_permissions_of_the_umask_not_private_ones(tmp_path):
  # Shared data folders hold record indexes that other users read.
  old = os.umask(0o022)
  try:
    atomic.write_text(str(tmp_path / 'a'), 'x')
  finally:
    os.umask(old)
  assert (tmp_path / 'a').stat().st_mode & 0o777 == 0o644


def test_every_whole_file_writer_goes_through_the_helper(tmp_path, monkeypatch):
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from configs import default, schema
  from input_pipeline import folder, tfrecord_index
  from trainer import unreadable
  # pylint: enable=g-import-not-at-top
  written = []
  write_bytes = atomic.write_bytes
  monkeypatch.setattr(atomic, 'write_bytes',
                      lambda path, data: written.append(os.path.basename(path))
                      or write_bytes(path, data))

  schema.save(default.get_config(), str(tmp_path))
  folder.write_class_map(str(tmp_path / 'classes.json'), ['a', 'b'])
  (tmp_path / 'r').write_bytes(b'')
  tfrecord_index.load_offsets(str(tmp_path / 'r'), 0)

  class Found:
    def unreadable_examples(self):
      return {'train': {'x.jpg'}}
  unreadable.UnreadableExamples(str(tmp_path), Found(), process_count=1,
                                is_chief=True).update()

  assert written == ['config.json', 'classes.json', 'r.offsets.npz',
                     'unreadable_files.txt']
  assert schema.load_saved(str(tmp_path)).model.name == default.get_config().model.name
  assert unreadable.read(str(tmp_path)) == ['x.jpg']
  assert len(np.load(tmp_path / 'r.offsets.npz')['offsets']) == 0
  assert not [n for n in _names(tmp_path) if '.tmp' in n]
