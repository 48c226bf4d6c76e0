"""A stand-in for the `expecttest` package, which torch's test utilities import
(torch.testing._internal.common_utils) and which Debian 12 does not ship.

The distributed tests never compare against inline expected strings, so the
two names common_utils uses are enough: the ACCEPT flag (rewrite expectations:
never here) and the TestCase base class.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertEqual(actual, expect)
