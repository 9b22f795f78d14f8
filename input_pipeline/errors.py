"""The one exception type a user sees for a problem with their data."""

from core.errors import OneLineError


class DataError(OneLineError):
  """A user-facing data problem, with a one-line message.

  Raised for what a user can fix without reading code: a missing directory,
  a split without images, class folders that disagree with the saved class
  map, an unknown `data.*` value. The trainer prints the message and exits 2.
  """
