"""scripts/step_diff.py: the lines of a step's kernel.cu against its predecessor's, per anchor, and the
check that each step's doc names, in its change section, every anchor its diff touches.

Run: python3 tests/test_step_diff.py   (no GPU, standard library only)."""
import os
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import step_diff as sd  # noqa: E402

OLD = """\
// [load] Bring the tile in.
load();
// [math] Multiply.
mul();
done();
// [tail] The end.
old_tail();
""".splitlines()

NEW = """\
// [load] Bring the tile in.
load();
// [math] Multiply.
mul();
extra_mul();
// [fresh] [also] A new idea, with its code.
fresh();
done();
// [tail] The end.
""".splitlines()


class Attribution(unittest.TestCase):
    def test_hunks_go_to_their_own_anchors_else_the_nearest_above(self):
        rows, total = sd.attribute(OLD, NEW)
        # extra_mul() and the [fresh] [also] block are one hunk; it carries its own anchors.
        self.assertEqual(rows["fresh"], [3, 0])
        self.assertEqual(rows["also"], [3, 0])
        # old_tail() removed alone: the nearest anchor above it in the old file.
        self.assertEqual(rows["tail"], [0, 1])
        self.assertNotIn("math", rows)
        self.assertNotIn("load", rows)
        self.assertEqual(total, [3, 1])

    def test_an_added_line_without_anchors_goes_to_the_nearest_above_in_the_new_file(self):
        rows, _ = sd.attribute(OLD[:5], OLD[:4] + ["mul2();"] + OLD[4:5])
        self.assertEqual(rows, {"math": [1, 0]})

    def test_a_hunk_above_every_anchor_is_no_anchor(self):
        rows, _ = sd.attribute(["a();", "// [x] y"], ["b();", "a();", "// [x] y"])
        self.assertEqual(rows, {sd.NO_ANCHOR: [1, 0]})

    def test_anchors_are_comments_that_begin_with_tags(self):
        self.assertEqual(sd.anchors("  x = 1;  // [a] [b-2] then prose [not-this]"), ["a", "b-2"])
        self.assertEqual(sd.anchors("// arrays indexed [lane][slot]"), [])
        self.assertEqual(sd.anchors("// [lane][row half]: an index, not an anchor"), [])

    def test_step_numbers_and_lab_markers_are_not_changes(self):
        a = sd.normalized("__global__ void step06_deferred();\n// lab:begin x: y\nf();\n// lab:end\n")
        b = sd.normalized("__global__ void step07_causal_skip();\nf();\n")
        self.assertEqual(a, ["__global__ void stepNN_deferred();", "f();"])
        self.assertEqual(b, ["__global__ void stepNN_causal_skip();", "f();"])

    def test_untabled_reads_the_change_section_only(self):
        doc = "## The change against step 01\n\n`[a]` here.\n\n## Later\n\n`[b]` there.\n"
        self.assertEqual(sd.change_section(doc).strip(), "`[a]` here.")


class Docs(unittest.TestCase):
    def test_every_step_doc_names_every_anchor_its_diff_touches(self):
        for step in sorted(sd.PREV):
            with self.subTest(step=step):
                with open(sd.doc_path(step)) as f:
                    text = f.read()
                self.assertEqual(sd.untabled(step, text), [], f"docs for step {step:02d}: add these to its change section")

    def test_every_step_doc_has_one_marker_for_its_table(self):
        for step in sorted(sd.PREV):
            with self.subTest(step=step):
                with open(sd.doc_path(step)) as f:
                    text = f.read()
                self.assertEqual(text.count(f"<!-- table:changes-{step:02d} -->"), 1)

    def test_every_step_prints_a_table(self):
        for step in sorted(sd.PREV):
            with self.subTest(step=step):
                self.assertTrue(sd.table(step))


if __name__ == "__main__":
    unittest.main()
