from oxygen_ros.demos.cli import main

raise SystemExit(main())
