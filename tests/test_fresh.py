#!/usr/bin/env python3
"""scripts/fresh.sh on a made-up tree: a source put back with new content but an old time is touched (so
that make rebuilds it), an unchanged one is not, and a build folder's first set-up touches nothing."""
import os
import subprocess
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD = 946684800  # 2000-01-01: older than any object a build would hold


def fresh(root, build):
    return subprocess.run(["bash", "-c", f'source "{ROOT}/scripts/fresh.sh"; fa_fresh "$0" "$1"', root, build],
                          capture_output=True, text=True, check=True)


class Fresh(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root, self.build = os.path.join(self.tmp.name, "src"), os.path.join(self.tmp.name, "build")
        os.makedirs(os.path.join(self.root, "steps", "01_naive"))
        os.makedirs(os.path.join(self.root, "common"))
        self.files = {"kernel": os.path.join(self.root, "steps", "01_naive", "kernel.cu"),
                      "header": os.path.join(self.root, "common", "util.hpp"),
                      "notes": os.path.join(self.root, "common", "notes.md")}
        for name, path in self.files.items():
            self.write(name, "one\n")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        with open(self.files[name], "w") as f:
            f.write(text)
        os.utime(self.files[name], (OLD, OLD))

    def mtime(self, name):
        return os.stat(self.files[name]).st_mtime

    def test_the_first_set_up_only_records(self):
        out = fresh(self.root, self.build)
        self.assertEqual(out.stderr, "")
        self.assertEqual(self.mtime("kernel"), OLD)
        with open(os.path.join(self.build, ".fa_source_sums")) as f:
            listed = f.read()
        self.assertIn("steps/01_naive/kernel.cu", listed)
        self.assertIn("common/util.hpp", listed)
        self.assertNotIn("notes.md", listed)  # not a source

    def test_a_changed_source_with_an_old_time_is_touched_and_the_rest_are_not(self):
        fresh(self.root, self.build)
        before = time.time() - 1
        self.write("kernel", "two\n")  # new content, but the old time: make alone would not rebuild it
        self.write("notes", "two\n")   # not a source: left alone
        out = fresh(self.root, self.build)
        self.assertGreater(self.mtime("kernel"), before)
        self.assertEqual(self.mtime("header"), OLD)
        self.assertEqual(self.mtime("notes"), OLD)
        self.assertIn("1 source(s) changed", out.stderr)
        # the new content is recorded: a third set-up touches nothing
        os.utime(self.files["kernel"], (OLD, OLD))
        out = fresh(self.root, self.build)
        self.assertEqual(self.mtime("kernel"), OLD)
        self.assertEqual(out.stderr, "")


if __name__ == "__main__":
    unittest.main()
