from policylab_client.cli import main

raise SystemExit(main())
