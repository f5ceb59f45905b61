"""`python -m deepledger`: the `deepledger` command."""

from deepledger.cli import main

raise SystemExit(main())
