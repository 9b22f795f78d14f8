"""The ground floor every package may import: errors and exit codes
(errors.py), leaving at once with one last line (exit.py), whole-file
writes (atomic.py), link units (units.py) and timing a piece of work
(timing.py). It imports nothing of the project."""
