"""`python -m harvester_demo`: the same as `harvester-demo-site`."""

from harvester_demo.commands import main

raise SystemExit(main())
