from rackscale.cli import main

main()
