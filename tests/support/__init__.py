"""What the tests share: helpers, fixtures' builders and paths. No test lives here, and
no test module imports another test module: what two of them need comes from here or
from ``conftest.py``; test doubles (servers, models, tools) live in ``tests.support.doubles``."""
