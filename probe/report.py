"""probe.json's figures in words, as --mode=probe prints them."""

from probe import hosts as hosts_lib

_LEVEL_WORDS = {
    'intra_host': 'inside a host',
    'inter_host': 'across hosts, one device each',
    'all_devices': 'all devices at once',
}
_OP_WORDS = {'all_reduce': 'all-reduce', 'all_gather': 'all-gather'}


def seconds(value: float | None) -> str:
  """0.0000312 -> '31.2 us'; None -> 'n/a'."""
  if value is None:
    return 'n/a'
  for unit, scale in (('s', 1.0), ('ms', 1e-3), ('us', 1e-6)):
    if abs(value) >= scale:
      return f'{value / scale:.3g} {unit}'
  return f'{value / 1e-9:.3g} ns'


def gbps(value: float | None) -> str:
  return 'unbounded' if value is None else f'{value:.3g} Gbit/s'


def _op_line(op: str, result: dict, configured: float | None) -> str:
  against = ''
  if configured and result['busbw_gbps'] is not None:
    against = f' ({100 * result["busbw_gbps"] / configured:.0f}% of the configured {configured:g})'
  return (f'    {_OP_WORDS[op]}: latency {seconds(result["latency_s"])}, bus bandwidth '
          f'{gbps(result["busbw_gbps"])}{against}, algorithm bandwidth '
          f'{gbps(result["algbw_gbps"])}; {len(result["points"])} sizes, '
          f'{result["points"][0]["message_bytes"]:,} to '
          f'{result["points"][-1]["message_bytes"]:,} bytes, worst fit '
          f'{100 * result["max_relative_residual"]:.0f}%')


def summary(record: dict, path: str) -> str:
  """Lines saying what the probe measured, for a person."""
  p, h = record['provenance'], record['hosts']
  lines = [
      f'probe: {p["process_count"]} process(es), {p["device_count"]} {p["platform"]} '
      f'device(s) ({p["device_kind"]}); {len(h["processes_by_host"])} host(s) by '
      f'{h["grouping"]}: {h["why"]}',
      'collectives (fitted t = latency + bytes / bandwidth; bus bandwidth as NCCL '
      "counts it, comparable with a link's rate):",
  ]
  for level in hosts_lib.LEVELS:
    entry = record['collectives'][level]
    if not entry['measured']:
      lines.append(f'  {_LEVEL_WORDS[level]}: not measured ({entry["reason"]})')
      continue
    lines.append(f'  {_LEVEL_WORDS[level]} ({entry["participants"]} devices):')
    for op in ('all_reduce', 'all_gather'):
      lines.append(_op_line(op, entry[op], entry['configured_gbps']))
  s = record['step_fixed_cost']
  extras = ', '.join(f'{q["operands"]} arrays {seconds(q["extra_s"])}' for q in s['points'])
  lines.append(f'a data-parallel step beyond its compute: fixed {seconds(s["fixed_cost_s"])} '
               f'+ {seconds(s["per_operand_s"])} per array of its all-reduce (a tiny '
               f'model\'s step on all {s["participants"]} devices less on one: {extras})')
  if s.get('by_array_bytes'):
    sized = ', '.join(f'{e["array_bytes"]:,} bytes {seconds(e["per_operand_s"])}'
                      for e in s['by_array_bytes'])
    lines.append(f'  per array of one size, its bytes included: {sized}')
  c = record['compute']
  lines.append(f'compute of {record["model"]["name"]} (forward and backward on each '
               'device at once, slowest process):')
  for point in c['points']:
    lines.append(f'  per-device batch {point["per_device_batch"]}: '
                 f'{seconds(point["compute_s"])}, {point["images_per_sec_per_device"]:,.1f} '
                 'images/s per device')
  if c['stopped_by_memory']:
    lines.append('  larger batches do not fit the device memory')
  i = record['host_input']
  lines.append(f'input: {i["verdict"]}' if i['measured']
               else f'input: not measured ({i["reason"]})')
  lines.append(f'probe: wrote {path} in {record["elapsed_s"]:.1f} s')
  return '\n'.join(lines)
