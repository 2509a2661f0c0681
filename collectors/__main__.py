"""Allow ``python -m collectors``."""

from collectors.cli import main

raise SystemExit(main())
