import io
import os
import tempfile
import unittest
from contextlib import redirect_stdout

from todo.cli import main


def run(*argv):
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(list(argv))
    return rc, out.getvalue()


class CliTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        os.environ["TODO_FILE"] = os.path.join(self.dir.name, "todo.json")

    def tearDown(self):
        self.dir.cleanup()

    def test_add_list_done(self):
        self.assertEqual(run("add", "buy", "milk"), (0, "added 1\n"))
        self.assertEqual(run("add", "call mom"), (0, "added 2\n"))
        self.assertEqual(run("done", "2"), (0, "done 2\n"))
        self.assertEqual(run("list"), (0, "[ ] 1 buy milk\n[x] 2 call mom\n"))


if __name__ == "__main__":
    unittest.main()
