from mcf.sw.cli import main

raise SystemExit(main())
