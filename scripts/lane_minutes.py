"""Where each minute of make test's pytest lanes went: per lane, its wall time beside the sum of
its tests' own times, and the test files that took the most (from each lane's JUnit XML, written
by scripts/test.sh). Printed after the lanes; reads files only."""

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

TOP = 8


def lane_files(xml: Path) -> tuple[float, Counter]:
    root = ET.parse(xml).getroot()  # noqa: S314 (pytest wrote it, in this run)
    suites = [root] if root.tag == "testsuite" else list(root)
    wall = sum(float(s.get("time", 0)) for s in suites)
    by_file: Counter = Counter()
    for case in root.iter("testcase"):
        parts = (case.get("classname") or "?").split(".")
        if parts[-1][:1].isupper():  # a test class: its module is the rest
            parts = parts[:-1]
        by_file["/".join(parts) + ".py"] += float(case.get("time", 0))
    return wall, by_file


def main(folder: str) -> None:
    print("==> where the minutes went, by lane (JUnit times: setup and teardown included)")
    for xml in sorted(Path(folder).glob("*.xml")):
        wall, by_file = lane_files(xml)
        print(
            f"  {xml.stem}: {wall / 60:.1f} min in pytest, {sum(by_file.values()) / 60:.1f}"
            f" min of test time over {len(by_file)} files; the most:"
        )
        for name, seconds in by_file.most_common(TOP):
            print(f"    {seconds:7.1f} s  {name}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".local/test-lanes")
