from scorecli.cli import main

main()
