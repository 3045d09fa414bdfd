from hostgap.cli import main

main()
