"""What a compiled step needs in device memory."""


def describe_memory(compiled) -> str:
  """One line from a compiled step's memory analysis (per device)."""
  analysis = compiled.memory_analysis()
  if analysis is None:
    return 'memory analysis: not available on this backend'
  mib = lambda n: f'{n / 2**20:.1f} MiB'
  return (f'per-device memory: arguments {mib(analysis.argument_size_in_bytes)}, '
          f'outputs {mib(analysis.output_size_in_bytes)}, '
          f'temporaries {mib(analysis.temp_size_in_bytes)}, '
          f'generated code {mib(analysis.generated_code_size_in_bytes)}')


