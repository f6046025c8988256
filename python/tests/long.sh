#!/bin/sh
# make check-long's run of the Python suite (CI runs it): every test of
# python/tests/run.sh (make check) at full size, and each test that takes a
# `server` against dsjobd and against gearmand 1.1.20, the reference that
# validates its expectations (make check: dsjobd alone, smaller counts).
DSJOB_PY_SERVERS="dsjobd gearmand"
DSJOB_PY_LONG=1
export DSJOB_PY_SERVERS DSJOB_PY_LONG
exec "${top_srcdir:-.}/python/tests/run.sh" "$@"
