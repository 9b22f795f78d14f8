"""Every committed plot under results/, drawn again from the committed data.

  .venv/bin/python benchmarks/make_plots.py                # rewrites the PNGs in place
  .venv/bin/python benchmarks/make_plots.py --out_dir=DIR  # the same tree under DIR

Each figure draws one run, the last of its results file, and states under
its axes that run's command, date, commit and hardware
(benchmarks/committed_results.py). The study's figures are the study's own
(planner/report.py) with that caption added.
"""

import argparse
import os
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import committed_results
from planner import report

# results file -> the PNGs drawn from it, beside it; paths in the repository
FIGURES = {
    'results/engine_contrast/results_three_engines.jsonl':
        ['results/engine_contrast/images_per_sec.png'],
    'results/study/study.jsonl':
        ['results/study/study_step_time_vs_shards.png',
         'results/study/study_throughput_vs_workers.png',
         'results/study/study_predicted_vs_measured.png'],
}
_DPI = 100
_CAPTION_POINTS = 7


def _plt():
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def add_caption(png: str, caption: str, out: str) -> None:
  """`png` with `caption` in a strip below it, pixel for pixel, written to `out`."""
  plt = _plt()
  image = plt.imread(png)
  height, width = image.shape[:2]
  line_px = _CAPTION_POINTS * _DPI / 72
  chars = int(width / (0.62 * line_px)) - 2  # a monospace character is ~0.6 em wide
  lines = [wrapped for line in caption.splitlines()
           for wrapped in textwrap.wrap(line, chars, break_on_hyphens=False)]
  strip = int((len(lines) + 1) * 1.3 * line_px)
  fig = plt.figure(figsize=(width / _DPI, (height + strip) / _DPI), dpi=_DPI)
  fig.figimage(image, 0, strip)
  fig.text(0.5 * line_px / width, 1 - (height + 0.5 * line_px) / (height + strip),
           '\n'.join(lines), fontsize=_CAPTION_POINTS, family='monospace', va='top')
  fig.savefig(out, dpi=_DPI, metadata={'Software': None})
  plt.close(fig)


def draw_engine_contrast(records: list[dict], path: str) -> None:
  """images/s against workers, one panel per model and link: the PS engine
  at each N_ps and the all-reduce engine over that link, and SPMD (XLA's
  collectives in memory, the same in every panel of a model)."""
  plt = _plt()
  emulated = [r for r in records if r['engine'] != 'spmd']
  panels = sorted({(r['model'], r['bandwidth_gbps']) for r in emulated})
  workers = sorted({r['num_workers'] for r in records})
  fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.5), squeeze=False)
  for ax, (model, bandwidth) in zip(axes[0], panels):
    here = [r for r in emulated if (r['model'], r['bandwidth_gbps']) == (model, bandwidth)]
    shard_counts = sorted({r['num_shards'] for r in here if r['engine'] == 'ps'})
    for k, n_ps in enumerate(shard_counts):
      cells = sorted((r['num_workers'], r['images_per_sec']) for r in here
                     if r['engine'] == 'ps' and r['num_shards'] == n_ps)
      ax.plot(*zip(*cells), marker='o', color=plt.cm.viridis(k / max(1, len(shard_counts))),
              label=f'PS, N_ps = {n_ps}')
    ring = sorted((r['num_workers'], r['images_per_sec']) for r in here
                  if r['engine'] == 'allreduce')
    if ring:
      ax.plot(*zip(*ring), marker='^', color='tab:red', linewidth=2,
              label='all-reduce (ring over the links)')
    spmd = sorted((r['num_workers'], r['images_per_sec']) for r in records
                  if r['model'] == model and r['engine'] == 'spmd')
    ax.plot(*zip(*spmd), marker='s', color='black', linestyle='--',
            label='SPMD (collectives in memory)')
    batch = next(r['batch_size'] for r in records if r['model'] == model)
    link = 'unlimited' if bandwidth == 0 else f'{bandwidth:g} Gbit/s'
    ax.set(title=f'{model}, global batch {batch}; links {link}',
           xlabel='workers N_w (emulated devices)', ylabel='images/s', xticks=workers)
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=_DPI, metadata={'Software': None})
  plt.close(fig)


def draw(out_dir: str = committed_results.REPO) -> list[str]:
  """Every figure of FIGURES under `out_dir`; returns their paths."""
  index = committed_results.load_index()
  written = []
  with tempfile.TemporaryDirectory() as scratch:
    for results_file, pngs in FIGURES.items():
      run = committed_results.load(results_file, index)[1][-1]
      if results_file.endswith('study.jsonl'):
        report.write_study(run.records, scratch)  # its plots, under their own names
      else:
        draw_engine_contrast(run.records, os.path.join(scratch, os.path.basename(pngs[0])))
      for png in pngs:
        out = os.path.join(out_dir, png)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        add_caption(os.path.join(scratch, os.path.basename(png)), run.caption(), out)
        written.append(out)
  return written


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out_dir', default=committed_results.REPO,
                      help='where the PNGs go, in the layout of the repository (default: '
                           'the repository itself, results/...)')
  for path in draw(parser.parse_args().out_dir):
    print(path)


if __name__ == '__main__':
  main()
