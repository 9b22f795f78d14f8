"""Log set-up: our progress at INFO, libraries only when they warn."""

import logging

from absl import logging as absl_logging

_OWN_PACKAGES = ('/trainer/', '/planner/', '/probe/', '/modes/', '/cli/', '/input_pipeline/',
                 '/models/', '/coordination/', '/configs/', '/core/', '/main.py')


class _OwnInfoOnly(logging.Filter):
  """Orbax, JAX and TensorFlow log every save and backend probe at INFO
  through the shared absl logger; that drowns the progress lines. Keep INFO
  from this project's files and WARNING and above from everyone."""

  def filter(self, record: logging.LogRecord) -> bool:
    return (record.levelno >= logging.WARNING
            or any(p in record.pathname for p in _OWN_PACKAGES))


def configure() -> None:
  absl_logging.set_verbosity(absl_logging.INFO)
  absl_logging.get_absl_handler().addFilter(_OwnInfoOnly())
