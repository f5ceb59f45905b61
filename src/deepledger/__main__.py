from deepledger.cli import main

raise SystemExit(main())
