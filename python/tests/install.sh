#!/bin/sh
# make check-long's part of the Python suite: test_install.py, pip install
# of the package offline against this build (it compiles the extension
# again, the longest of the Python tests), through python/tests/run.sh.
DSJOB_PYTEST_FILES=test_install.py
export DSJOB_PYTEST_FILES
exec "${top_srcdir:-.}/python/tests/run.sh" "$@"
