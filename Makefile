# The two set-up commands of README.md. Each (re)builds .venv when it is
# missing or older than requirements.txt, then does its job.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
WORKDIR ?= runs/quickstart

.PHONY: quickstart test clean-venv

$(STAMP): requirements.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -r requirements.txt
	touch $(STAMP)

quickstart: $(STAMP)
	$(VENV)/bin/python main.py --config=configs/quickstart.py --workdir=$(WORKDIR)

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --dist loadfile tests

clean-venv:
	rm -rf $(VENV)
