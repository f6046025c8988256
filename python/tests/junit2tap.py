"""Prints pytest's JUnit XML reports (one or more, in order) as TAP: one
line per test case, a skipped one as "# SKIP reason", a failed one as
"not ok" with its message."""

import sys
import xml.etree.ElementTree as ET

cases = [c for f in sys.argv[1:] for c in ET.parse(f).getroot().iter("testcase")]
print(f"1..{len(cases)}")
for n, case in enumerate(cases, 1):
    name = f"{case.get('classname')}.{case.get('name')}".replace("#", "")
    bad = case.find("failure")
    if bad is None:
        bad = case.find("error")
    skip = case.find("skipped")
    if bad is not None:
        print(f"not ok {n} - {name}")
        for line in (bad.get("message") or "").splitlines():
            print(f"#   {line}")
    elif skip is not None:
        print(f"ok {n} - {name} # SKIP {(skip.get('message') or '').splitlines()[0:1]}")
    else:
        print(f"ok {n} - {name}")
