"""The test doubles' own tests (tests/support/doubles): they must speak what the real
clients and servers expect, or the tests built on them prove nothing."""
