import unittest

from intervals import free_slots, merge


class MergeTest(unittest.TestCase):
    def test_overlapping(self):
        self.assertEqual(merge([(1, 4), (2, 6), (8, 9)]), [(1, 6), (8, 9)])

    def test_unsorted(self):
        self.assertEqual(merge([(8, 9), (1, 4)]), [(1, 4), (8, 9)])


class FreeSlotsTest(unittest.TestCase):
    def test_simple_day(self):
        self.assertEqual(free_slots([(60, 120)], 0, 240), [(0, 60), (120, 240)])


if __name__ == "__main__":
    unittest.main()
